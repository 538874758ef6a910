"""Pillow datasets for the torchvision/timm baseline (``model.input: rgb``): what a source's
``pillow`` factory returns (:mod:`dctnet.data.sources`) — ``dataset[index]`` is ``(PIL RGB image,
label)``, a bad image raises Pillow's own error, and ``sample_name(index)`` names the sample; the
baseline (:mod:`dctnet.train.baseline`) applies the transforms and ``data.on_error``.

torchvision and Pillow are optional dependencies (the test extras): imported when one is built.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from dctnet.data.dataset import IMG_EXTENSIONS

__all__ = ["PilLoader", "PillowFiles", "PillowFolder"]


class PilLoader:
    """torchvision's default loader (Pillow, RGB); ``accept_truncated`` reads a cut file as Pillow
    can (the rest grey), as ``data.warnings: accept`` has dctnet train on libjpeg's fill-in."""

    def __init__(self, accept_truncated: bool) -> None:
        self.accept_truncated = accept_truncated

    def __call__(self, path: str):
        from PIL import Image, ImageFile  # optional dependency (see the module docstring)

        with open(path, "rb") as f:
            img = Image.open(f)
            if not self.accept_truncated:
                return img.convert("RGB")
            before, ImageFile.LOAD_TRUNCATED_IMAGES = ImageFile.LOAD_TRUNCATED_IMAGES, True  # Pillow's only switch
            try:
                return img.convert("RGB")
            finally:
                ImageFile.LOAD_TRUNCATED_IMAGES = before


class PillowFiles(torch.utils.data.Dataset):
    """``(path, label)`` samples read by Pillow (:class:`PilLoader`): ``(image, label)``; ``classes``
    their names."""

    def __init__(self, samples: Sequence[tuple[str, int]], classes: Sequence[str],
                 accept_truncated: bool = False) -> None:
        self.samples: list[tuple[str, int]] = list(samples)
        self.classes = list(classes)
        self.targets = [t for _, t in self.samples]
        self.loader = PilLoader(accept_truncated)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int):
        path, target = self.samples[index]
        return self.loader(path), target

    def sample_name(self, index: int) -> str:
        """The file of sample ``index`` (how messages name it)."""
        return self.samples[index][0]


class PillowFolder(PillowFiles):
    """torchvision's ``ImageFolder`` over the files dctnet's folder datasets read (JPEG names only,
    empty classes kept, so labels match), only the ``usable`` ones when given: ``(image, label)``
    by Pillow (:class:`PilLoader`)."""

    def __init__(self, root: str | os.PathLike, accept_truncated: bool = False,
                 usable: Sequence[str] | None = None) -> None:
        import torchvision  # optional dependency (see the module docstring)

        folder = torchvision.datasets.ImageFolder(str(root), allow_empty=True,
                                                  is_valid_file=lambda p: p.lower().endswith(IMG_EXTENSIONS))
        samples = folder.samples
        if usable is not None:
            keep = {os.path.normpath(p) for p in usable}
            samples = [s for s in samples if os.path.normpath(s[0]) in keep]
        super().__init__(samples, folder.classes, accept_truncated)
        self.root, self.class_to_idx = str(root), folder.class_to_idx
        self.imgs = self.samples
