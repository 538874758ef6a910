#!/usr/bin/env python3
"""Stem table: parameters, FLOPs and max logit error against the RGB model, per supported stem.

Models are randomly initialised (nothing is downloaded); the logit check uses real photos
(Imagenette val, 224², from $DCTNET_DATA or ../shared) or generated ones. Error = max |logit
difference| between ``dct_model(coefficients)`` and ``model(normalize(rgb))`` where ``rgb`` is the
linear reconstruction of the same coefficients, relative to max |logit|. FLOPs are torch's
FlopCounterMode counts (2 per multiply-add) for one 224² image.

    python benchmarks/stems.py
"""

from __future__ import annotations

import copy
import os
from pathlib import Path

import torch
import torchvision
from torch import nn

import dctnet
from dctnet.kernels import color as KC
from dctnet.kernels import dct as KD
import dctnet.image as IM
import dctnet.resize as RS
import dctnet.models as M
from dctnet.kernels import coefficients as TF

ROOT = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("DCTNET_DATA", ROOT.parent / "shared" / "data" / "imagenette"))


def photos(n: int = 4) -> torch.Tensor:
    files = sorted((DATA / "val").glob("*/*.JPEG"))[::997][:n]
    if files:
        srcs = [str(f) for f in files]
    else:
        from dctnet.synthetic import synthetic_jpeg

        srcs = [synthetic_jpeg(i, 224, 224) for i in range(n)]
    imgs = []
    for s in srcs:
        c = dctnet.read_coefficients(s)
        rgb = IM.coefficients_to_rgb(c)
        imgs.append(RS.resized_crop(rgb, torch.tensor([[0, 0, c.height, c.width]]), (224, 224)))
    return TF.coefficient_image_from_rgb(torch.cat(imgs).double()).float()


def params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


def main() -> None:
    import timm

    torch.manual_seed(0)
    x = photos()
    rgb = KC.ycbcr_to_rgb(KD.block_idct(x) + 128.0, dim=1) / 255.0
    x1 = x[:1]
    rows = []

    def norm(r, mean, std):
        return (r - torch.tensor(mean).reshape(1, 3, 1, 1)) / torch.tensor(std).reshape(1, 3, 1, 1)

    def vit_rows(name, model, conv, mean, std):
        model.eval()
        with torch.no_grad():
            ref = model(norm(rgb, mean, std))
        rgb_flops = M.count_flops(conv, torch.zeros(1, 3, 224, 224))
        rows.append((f"{name}: RGB conv (original)", params(conv), rgb_flops, "—"))
        for label, kw in (("DCT patch embed, chroma upsampled", {}),
                          ("DCT patch embed, native 4:2:0 chroma", {"chroma": "native"}),
                          ("DCT patch embed, zigzag-15 frequencies", {"keep": 15}),
                          ("DCT patch embed, square 4×4 frequencies", {"keep": "square:4"})):
            dct = M.swap_stem(copy.deepcopy(model), **kw).eval()
            stem = M.stem_modules(dct)[0]
            if kw.get("chroma") == "native":
                y = x[:, 0]  # 4:2:0 planes: chroma box-downsampled 2×2, as an encoder would store it
                c = torch.stack([KD.block_dct(nn.functional.avg_pool2d(KD.block_idct(x[:, k]).unsqueeze(1), 2)[:, 0])
                                 for k in (1, 2)], 1)
                inp, inp1 = (y, c), (y[:1], c[:1])
                with torch.no_grad():  # reference: the same 4:2:0 planes, nearest-upsampled
                    up = torch.stack([y, *(KD.upsample_nearest_dct(c[:, k], 2, 2) for k in (0, 1))], 1)
                    r = model(norm(KC.ycbcr_to_rgb(KD.block_idct(up) + 128.0, dim=1) / 255.0, mean, std))
            else:
                inp, inp1, r = x, x1, ref
            with torch.no_grad():
                out = dct(inp)
            err = (out - r).abs().max().item() / r.abs().max().item()
            rows.append((f"{name}: {label}", params(stem), M.count_flops(stem, inp1), f"{err:.1e}"))

    tv = torchvision.models.vit_b_16()
    nn.init.normal_(tv.heads.head.weight, std=0.02)
    vit_rows("torchvision vit_b_16", tv, tv.conv_proj, M.IMAGENET_MEAN, M.IMAGENET_STD)
    tm = timm.create_model("vit_small_patch16_224", pretrained=False)
    vit_rows("timm vit_small_patch16_224", tm, tm.patch_embed.proj, (0.5,) * 3, (0.5,) * 3)

    for arch in ("resnet18", "resnet50"):
        model = getattr(torchvision.models, arch)().eval()
        total_rgb = M.count_flops(model, torch.zeros(1, 3, 224, 224))
        stem_rgb = nn.Sequential(model.conv1, model.bn1, model.relu, model.maxpool)
        rows.append((f"{arch}: RGB conv1+bn+pool (original; model {total_rgb / 1e9:.2f} GFLOPs)", params(stem_rgb),
                     M.count_flops(stem_rgb, torch.zeros(1, 3, 224, 224)), "—"))
        with torch.no_grad():
            ref = model(norm(rgb, M.IMAGENET_MEAN, M.IMAGENET_STD))
        for stem in ("idct", "dct-up", "dct8"):
            dct = M.swap_stem(copy.deepcopy(model), stem=stem).eval()
            total = M.count_flops(dct, x1)
            if stem == "idct":
                with torch.no_grad():
                    err = f"{(dct(x) - ref).abs().max().item() / ref.abs().max().item():.1e}"
            else:
                err = "learned (trained, not converted)"
            s = M.stem_modules(dct)[0]
            label = {"idct": "idct stem (device IDCT + colour + original conv1)",
                     "dct-up": "learned DCT stem, upsampled into layer1",
                     "dct8": "learned DCT stem at 1/8, replaces conv1..layer1"}[stem]
            rows.append((f"{arch}: {label}; model {total / 1e9:.2f} GFLOPs", params(s), M.count_flops(s, x1), err))

    print("| stem | parameters | stem FLOPs (224²) | max logit error vs RGB (relative) |")
    print("|---|---:|---:|---:|")
    for name, p, f, e in rows:
        print(f"| {name} | {p:,} | {f / 1e6:,.1f} M | {e} |")


if __name__ == "__main__":
    main()
