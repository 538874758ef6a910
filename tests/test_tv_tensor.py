"""What ``ToCoefficients`` returns, under torchvision v2: every v2 transform either raises or
computes what it computes on the pixels — never alters coefficients as if they were pixels.

The oracle is torchvision itself on the pixels of the same image with the same draws (its global
RNG reseeded before both calls), compared in pixels (``to_rgb`` of the coefficients); ``JPEG``,
whose DCT-domain form requantizes the coefficients instead of re-encoding 8-bit pixels, is held to
Pillow's own encode of those pixels (quality q, 4:4:4). Before, ``v2.RandAugment`` on a plain
coefficient tensor raised in 24 of 40 seeds and silently altered the coefficients in 16.
"""

from __future__ import annotations

import inspect
import io

import numpy as np
import pytest
import torch
from PIL import Image
from torchvision.transforms import v2

from dctnet import transforms as T
from dctnet.transforms.base import to_pixels
from dctnet.transforms.tv import DCTImage

from test_transforms import photos

#: v2 transforms that need arguments, built with typical ones
ARGS = {
    "CenterCrop": (16,), "FiveCrop": (16,), "TenCrop": (16,), "GaussianBlur": (3,), "JPEG": ((50, 50),),
    "Normalize": ([0.5] * 3, [0.2] * 3), "Pad": (8,), "RandomAdjustSharpness": (2.0, 1.0), "RandomAffine": (10,),
    "RandomCrop": (16,), "RandomPosterize": (4, 1.0), "RandomResize": (16, 40), "RandomResizedCrop": (16,),
    "RandomRotation": (10,), "RandomShortestSize": (16,), "RandomSolarize": (0.5, 1.0), "Resize": (16,),
    "ScaleJitter": ((32, 32),), "ToDtype": (torch.float16,), "ConvertBoundingBoxFormat": ("XYXY",),
    "UniformTemporalSubsample": (2,), "LinearTransformation": (torch.eye(3 * 32 * 32), torch.zeros(3 * 32 * 32)),
}
KWARGS = {"ColorJitter": {"brightness": 0.2, "contrast": 0.2, "saturation": 0.2},
          "RandomPhotometricDistort": {"hue": (0.0, 0.0)}, "Grayscale": {"num_output_channels": 3},
          "RandomGrayscale": {"p": 1.0}}  # (so that a silent change could not hide behind p=0.1)
#: not image ops (containers of other transforms, PIL conversions, box/keypoint-only ops)
NOT_OPS = {"Compose", "Lambda", "RandomApply", "RandomChoice", "RandomOrder", "ToPILImage", "PILToTensor", "ToTensor",
           "SetClampingMode"}
#: the v2 ops dctnet gives a DCT-domain kernel (everything else must raise or pass the input through)
#: (RandomGrayscale, like RandomCrop, asks torchvision's own types for the image first: "No image" TypeError)
KERNEL_OPS = {"RandomHorizontalFlip", "RandomVerticalFlip", "ColorJitter", "Grayscale", "JPEG",
              "RandomPhotometricDistort", "CenterCrop"}


def v2_ops() -> list[str]:
    return sorted(n for n in dir(v2) if inspect.isclass(getattr(v2, n)) and issubclass(getattr(v2, n), v2.Transform)
                  and n not in ("Transform", *NOT_OPS))


@pytest.fixture(scope="module")
def coefficients() -> DCTImage:
    """What a user holds: ``ToCoefficients`` of real 32² crops, mid-range so that no op clamps."""
    imgs = [np.asarray(Image.open(p).convert("RGB").resize((32, 32), Image.BICUBIC)) for p in photos(4)]
    x = torch.from_numpy(np.stack(imgs)).permute(0, 3, 1, 2).double() / 255
    return T.ToCoefficients()(0.25 + 0.5 * x)


def test_to_coefficients_returns_the_torchvision_tensor_type(coefficients):
    assert type(coefficients) is DCTImage and coefficients.shape == (4, 3, 4, 4, 64)
    x = torch.rand(2, 3, 16, 16)
    assert type(T.Compose([T.RandomHorizontalFlip(), T.ToCoefficients()], seed=0)(x)) is DCTImage
    assert type(T.RandomHorizontalFlip()(coefficients)) is DCTImage  # dctnet's own ops keep it
    assert type(T.ToRGB()(coefficients)) is torch.Tensor  # pixels: torchvision's plain image
    stats = T.Normalize(torch.zeros(3, 64), torch.ones(3, 64))
    assert type(stats(coefficients)) is torch.Tensor  # standardised values are no image's coefficients
    step = T.DeviceStep((16, 16), input="coefficients", seed=0)  # the device half stays plain (compiled)
    assert type(step._finish(T.ToCoefficients().execute(x, None, {})[0])) is torch.Tensor


def test_torchvisions_randaugment_never_alters_coefficients(coefficients):
    """The issue's case: 40 seeds, every one a clear TypeError naming dctnet's RandAugment."""
    for seed in range(40):
        torch.manual_seed(seed)
        with pytest.raises(TypeError, match="dctnet.transforms.RandAugment"):
            v2.RandAugment()(coefficients)


@pytest.mark.parametrize("name", v2_ops())
def test_every_v2_op_raises_or_equals_torchvision_on_the_pixels(name, coefficients):
    op = getattr(v2, name)(*ARGS.get(name, ()), **KWARGS.get(name, {}))
    pixels = to_pixels(coefficients.as_subclass(torch.Tensor))
    altered = 0
    for seed in range(6):
        torch.manual_seed(seed)
        try:
            out = op(coefficients)
        except (TypeError, ValueError):  # a clear refusal (ValueError: an op that needs boxes or labels)
            continue
        out = out.as_subclass(torch.Tensor) if isinstance(out, torch.Tensor) else out
        if isinstance(out, torch.Tensor) and out.shape == coefficients.shape and torch.equal(
                out, coefficients.as_subclass(torch.Tensor)):
            continue  # passed through unchanged (an identity draw, or an op with nothing to do on an image)
        assert name in KERNEL_OPS, f"torchvision's {name} altered coefficients without a DCT-domain kernel"
        altered += 1
        got = to_pixels(out)
        if name == "JPEG":  # Pillow's encode of the same pixels at quality 50, full chroma
            want = torch.stack([pillow_jpeg(p, 50) for p in pixels])
            distortion = (want - pixels).abs().mean()  # what JPEG itself changes: 5.4 grey levels here
            # requantized coefficients: within 1.1 grey levels of Pillow's file, and as distorted
            assert (got - want).abs().mean() < 0.3 * distortion
            assert abs((got - pixels).abs().mean() - distortion) < 0.1 * distortion
            continue
        torch.manual_seed(seed)
        want = op(pixels)  # torchvision on the pixels, the same draws
        torch.testing.assert_close(got, want.to(got.dtype), atol=2e-3, rtol=0)  # torchvision's grey: 0.2989 R
    if name in KERNEL_OPS - {"CenterCrop", "RandomPhotometricDistort"}:  # (it draws a hue shift, which raises)
        assert altered, f"{name} never ran its DCT-domain kernel in 6 seeds"


def pillow_jpeg(rgb: torch.Tensor, quality: int) -> torch.Tensor:
    arr = (rgb.clamp(0, 1) * 255).round().byte().permute(1, 2, 0).numpy()
    buf = io.BytesIO()
    Image.fromarray(arr).save(buf, "JPEG", quality=quality, subsampling=0)
    out = np.asarray(Image.open(io.BytesIO(buf.getvalue())).convert("RGB"))
    return torch.from_numpy(out.copy()).permute(2, 0, 1).double() / 255
