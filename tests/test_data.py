"""Datasets, collate, samplers and loaders: reproducibility, coverage, bad samples, EXIF."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import dctnet
from dctnet.kernels import dct as KD
import dctnet.image as IM
from dctnet import data as D
from dctnet import transforms as T
from dctnet.synthetic import synthetic_image, synthetic_jpeg

from conftest import CORPUS


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    root = tmp_path_factory.mktemp("folder")
    variants = [dict(subsampling="4:2:0"), dict(gray=True), dict(subsampling="4:4:4"), dict(subsampling="4:2:2"),
                dict(subsampling="4:2:0", progressive=True)]
    for k in range(3):
        (root / f"class{k}").mkdir()
        for i in range(13):
            n = 13 * k + i
            (root / f"class{k}" / f"{i:02d}.jpg").write_bytes(
                synthetic_jpeg(n, 40 + 7 * i, 56 + 5 * k, **variants[n % len(variants)]))
    return root


def batches_equal(a: T.JpegBatch, b: T.JpegBatch) -> bool:
    return all(torch.equal(x, y) for x, y in zip(a.tensors(), b.tensors()))


def test_dataset_layout_and_labels(folder):
    ds = D.ImageFolderDataset(folder, crop=D.RandomResizedCrop(), seed=3)
    assert ds.classes == ["class0", "class1", "class2"] and len(ds) == 39
    s = ds[5]
    assert s.label == 0 and s.index == 5
    rows, cols = s.mcu
    assert all(p.shape == (rows * v, cols * h, 64) for p, (h, v) in zip(s.planes, s.sampling))
    top, left, h, w = s.box
    assert 0 <= top and top + h <= s.valid[0] and 0 <= left and left + w <= s.valid[1]
    assert ds[5].box == s.box  # a pure function of (seed, epoch, index)
    boxes = {ds[(e, 5)].box for e in range(8)}
    assert len(boxes) > 1  # the epoch changes the draw


def test_the_host_never_decodes_pixels(folder, tmp_path, monkeypatch):
    """Every layout (4:2:0, gray, 4:4:4, progressive, 4:2:2) reaches the batch in its own layout:
    the loaders and the cache gather never call a pixel decoder or a forward DCT on the host."""
    def forbidden(*args, **kwargs):
        raise AssertionError("pixel work on the host")

    cache = D.build_cache(folder, tmp_path / "cache", format="sparse", progress=False)
    for module, name in ((IM, "to_rgb"), (IM, "coefficients_to_rgb"), (IM, "from_rgb"), (KD, "block_idct"),
                         (KD, "block_dct")):
        monkeypatch.setattr(module, name, forbidden)
    layouts = set()
    for ds in (D.ImageFolderDataset(folder, crop=D.RandomResizedCrop()), D.CacheDataset(cache, crop=D.RandomResizedCrop())):
        for b in D.ThreadLoader(ds, 8, threads=2, pin_memory=False):
            layouts |= {g.layout for g in b.groups}
            assert sum(len(g) for g in b.groups) == len(b)
    assert {cs for cs, _ in layouts} == {"YCbCr", "gray"}
    assert {s for _, s in layouts} >= {T.SAMPLING_420, ((2, 1), (1, 1), (1, 1)), ((1, 1), (1, 1), (1, 1)), ((1, 1),)}


def test_loaders_give_identical_batches(folder):
    ds = D.ImageFolderDataset(folder, crop=D.RandomResizedCrop(), seed=7)
    ref = list(D.ThreadLoader(ds, 8, sampler=D.EpochSampler(len(ds), seed=7), threads=1, pin_memory=False))
    for threads in (2, 3):
        got = list(D.ThreadLoader(ds, 8, sampler=D.EpochSampler(len(ds), seed=7), threads=threads, pin_memory=False))
        assert len(got) == len(ref) and all(batches_equal(a, b) for a, b in zip(got, ref))
    for workers in (0, 1, 2):
        dl = D.make_dataloader(ds, 8, sampler=D.EpochSampler(len(ds), seed=7), num_workers=workers, pin_memory=False)
        got = list(dl)
        assert len(got) == len(ref) and all(batches_equal(a, b) for a, b in zip(got, ref)), workers
    # a new epoch reshuffles and redraws
    s = D.EpochSampler(len(ds), seed=7)
    s.set_epoch(1)
    other = list(D.ThreadLoader(ds, 8, sampler=s, threads=2, pin_memory=False))
    assert not batches_equal(other[0], ref[0])


def test_distributed_split_covers_every_sample_once(folder):
    n = 39
    for world in (1, 2, 3, 4):
        seen = []
        for rank in range(world):
            s = D.EpochSampler(n, seed=1, rank=rank, world_size=world)
            s.set_epoch(5)
            idx = [i for _, i in s]
            assert len(idx) == len(s)
            seen += idx
        assert sorted(seen) == list(range(n))
        dropped = [i for r in range(world) for _, i in D.EpochSampler(n, seed=1, rank=r, world_size=world,
                                                                         drop_last=True)]
        assert len(dropped) == world * (n // world) and len(set(dropped)) == len(dropped)


def test_drop_last_and_batch_count(folder):
    ds = D.ImageFolderDataset(folder)
    assert len(D.ThreadLoader(ds, 8, drop_last=True)) == 4 == len(list(D.ThreadLoader(ds, 8, drop_last=True)))
    assert len(D.ThreadLoader(ds, 8)) == 5 and sum(len(b) for b in D.ThreadLoader(ds, 8)) == 39


def test_bad_sample_policy(folder, tmp_path):
    root = tmp_path / "bad"
    (root / "a").mkdir(parents=True)
    for i in range(5):
        (root / "a" / f"{i}.jpg").write_bytes(synthetic_jpeg(i, 32, 32))
    (root / "a" / "2.jpg").write_bytes(b"\xff\xd8 broken")
    (root / "a" / "4.jpg").write_bytes(synthetic_jpeg(9, 32, 32).replace(b"\xff\xc0", b"\xff\xc3", 1))
    raising = D.ImageFolderDataset(root)
    with pytest.raises(dctnet.JpegError, match=r"[24]\.jpg"):
        list(D.ThreadLoader(raising, 5, threads=1))
    skipping = D.ImageFolderDataset(root, on_error="skip")
    for loader in (D.ThreadLoader(skipping, 5, threads=2, pin_memory=False),
                   D.make_dataloader(skipping, 5, num_workers=1, pin_memory=False)):
        (batch,) = list(loader)
        assert len(batch) == 3 and sorted(batch.index.tolist()) == [0, 1, 3]
        names = sorted(name for _, name, _ in batch.skipped)
        assert names[0].endswith("2.jpg") and names[1].endswith("4.jpg")
        assert any("lossless" in reason for _, _, reason in batch.skipped)


def test_collate_fixed_grid_and_padding(folder):
    ds = D.ImageFolderDataset(folder, crop=D.CenterCrop())
    samples = [ds[i] for i in range(6)]
    b = D.collate(samples, grid=(12, 14), pin_memory=False)
    assert sorted(i for g in b.groups for i in g.rows.tolist()) == list(range(6))
    for g in b.groups:
        vmax, hmax = max(v for _, v in g.sampling), max(h for h, _ in g.sampling)
        for plane, (h, v) in zip(g.planes, g.sampling):
            assert plane.shape == (len(g), 12 // vmax * v, 14 // hmax * h, 64)
        for j, i in enumerate(g.rows.tolist()):
            s = samples[i]
            assert s.layout == g.layout and b.index[i] == s.index and tuple(b.boxes[i].tolist()) == s.box
            for plane, src in zip(g.planes, s.planes):
                ph, pw = src.shape[:2]
                assert torch.equal(plane[j, :ph, :pw], torch.from_numpy(src))
                assert not plane[j, ph:].any() and not plane[j, :, pw:].any()
    with pytest.raises(ValueError, match="grid"):
        D.collate(samples, grid=(2, 2), pin_memory=False)


def test_prefetcher_on_cpu_passes_batches_through(folder):
    ds = D.ImageFolderDataset(folder, crop=D.RandomResizedCrop(), seed=2)
    loader = D.ThreadLoader(ds, 8, threads=2, pin_memory=False)
    direct = list(loader)
    pre = list(D.DevicePrefetcher(loader, "cpu"))
    assert all(batches_equal(a, b) for a, b in zip(direct, pre))
    out = list(D.DevicePrefetcher(loader, "cpu", transform=lambda b: T.crops_to_coefficients(b, (32, 32))))
    assert out[0].shape == (8, 3, 4, 4, 64)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_prefetcher_on_cuda(folder):
    ds = D.ImageFolderDataset(folder, crop=D.RandomResizedCrop(), seed=2)
    loader = D.ThreadLoader(ds, 8, threads=2)
    cpu = [T.crops_to_coefficients(b, (32, 32)) for b in loader]
    gpu = list(D.DevicePrefetcher(loader, "cuda", transform=lambda b: T.crops_to_coefficients(b, (32, 32))))
    for a, b in zip(cpu, gpu):
        torch.testing.assert_close(b.cpu(), a, atol=1e-2, rtol=1e-4)


@pytest.mark.parametrize("orientation", range(1, 9))
def test_exif_orientation_applied_exactly(tmp_path, orientation):
    """Rotated planes decode to what Pillow's exif_transpose shows (MCU-multiple sizes: exact)."""
    img = synthetic_image(np.random.default_rng(orientation), 48, 64)
    im = Image.fromarray(img)
    exif = Image.Exif()
    exif[0x0112] = orientation
    path = tmp_path / "o.jpg"
    im.save(path, "JPEG", quality=90, exif=exif.tobytes())
    c = dctnet.read_coefficients(path)
    assert c.exif_orientation == orientation
    planes, sampling, h, w = D.apply_orientation(c.planes, c.sampling, c.height, c.width, c.exif_orientation)
    ours = IM.to_rgb([torch.from_numpy(p).unsqueeze(0) for p in planes], sampling, (h, w))
    from PIL import ImageOps

    with Image.open(path) as im:  # oracle: Pillow's decode, turned upright by Pillow
        ref = np.asarray(ImageOps.exif_transpose(im).convert("RGB"), dtype=np.float64)
    assert ref.shape[:2] == (h, w)
    err = np.abs(np.round(ours[0].permute(1, 2, 0).double().numpy() * 255) - ref)
    assert err.max() <= 4 and err.mean() < 1, (err.max(), err.mean())


def test_dataset_arguments_are_checked(folder, tmp_path):
    with pytest.raises(FileNotFoundError):
        D.ImageFolderDataset(tmp_path / "nope")
    with pytest.raises(ValueError, match="on_error"):
        D.ImageFolderDataset(folder, on_error="ignore")
    with pytest.raises(ValueError, match="no class"):
        D.ImageFolderDataset(tmp_path)


def test_corpus_through_the_loader_with_skip():
    """Every corpus file either becomes a sample or is skipped with a reason; nothing crashes."""
    files = sorted((CORPUS / "files").glob("*.jpg")) if (CORPUS / "files").is_dir() else []
    if not files:
        pytest.skip("corpus not found")
    import shutil
    import tempfile

    root = tempfile.mkdtemp()
    import os

    os.makedirs(f"{root}/all")
    for f in files:
        os.symlink(f, f"{root}/all/{f.name}")
    ds = D.ImageFolderDataset(root, crop=D.RandomResizedCrop(), on_error="skip")
    seen, skipped = 0, 0
    for b in D.ThreadLoader(ds, 32, threads=2, pin_memory=False):
        seen += len(b)
        skipped += len(b.skipped)
        T.crops_to_rgb(b, (32, 32))
    shutil.rmtree(root)
    # the catalog's 5 libjpeg errors, and the files that lost data (found by every windowed read:
    # the truncated ones from their bytes; corrupt data further down only where a crop meets it)
    refused = D.check_files([str(f) for f in files])
    accepted = D.check_files([str(f) for f in files], warnings="accept")
    cut = [p for p, w in accepted.warned.items() if "Premature end of JPEG file" in w]
    assert len(accepted.unusable) == 5 and cut
    assert seen + skipped == len(files) and 5 + len(cut) <= skipped <= len(refused.unusable)


# ---------------------------------------------------------------------- repeated augmentation (issue 29)
@pytest.mark.parametrize("n,repeats,world", [(1000, 3, 1), (1000, 3, 4), (300, 4, 2), (50, 3, 2), (7, 2, 3)])
def test_repeated_aug_sampler_is_timms_repeat_aug_sampler(n, repeats, world):
    """The same indices in the same order per rank and epoch as timm's ``RepeatAugSampler`` (DeiT's
    RASampler: its permutation seeded by the epoch is ours with seed 0; the repeats dealt to the ranks
    by stride; ``n // 256 · 256 / world`` a rank, ``ceil(n / world)`` below 256 samples)."""
    from timm.data.distributed_sampler import RepeatAugSampler

    for rank in range(world):
        theirs = RepeatAugSampler(list(range(n)), num_replicas=world, rank=rank, num_repeats=repeats)
        ours = D.RepeatedAugSampler(n, repeats, seed=0, rank=rank, world_size=world, keys=False)
        for epoch in (0, 3):
            theirs.set_epoch(epoch)
            ours.set_epoch(epoch)
            assert len(ours) == len(theirs) and list(ours) == list(theirs), (rank, epoch)


def test_every_repeat_of_an_image_is_a_distinct_crop(folder):
    """A crop is a function of (seed, epoch, index): a sampler that repeats an index gave every repeat the
    same box. The repeated-augmentation sampler's keys give each repeat its own: all repeats of every
    image in an epoch differ, on every rank."""
    ds = D.ImageFolderDataset(folder, crop=D.RandomResizedCrop(), seed=3)
    for rank in range(2):
        sampler = D.RepeatedAugSampler(len(ds), 3, seed=3, rank=rank, world_size=2)
        sampler.set_epoch(5)
        keys = list(sampler)
        assert all(k[0] & ((1 << D.loader.REPEAT_SHIFT) - 1) == 5 for k in keys)
        boxes: dict[int, list] = {}
        for (epoch, index), s in zip(keys, ds.load_batch(keys)):
            boxes.setdefault(index, []).append(tuple(s.box))
        repeated = {i: b for i, b in boxes.items() if len(b) > 1}
        assert repeated, "no image repeated on this rank"
        assert all(len(set(b)) == len(b) for b in repeated.values()), repeated
    # without the repeat in the key, the same index in one epoch is one box (what the sampler avoids)
    same = ds.load_batch([(5, 0), (5, 0)])
    assert same[0].box == same[1].box


def test_recipe_repeated_aug_drives_both_arms(tmp_path, folder):
    """``data.repeated_aug: 3`` gives dctnet's loader and the torchvision arm the repeated-augmentation
    sampler (timm's epoch length: ceil(39 / 1) samples here), both with repeat keys (the rgb arm's
    transforms draw from generators seeded per key, so each repeat of an image draws its own)."""
    from conftest import write_recipe
    from dctnet.train.pipeline import build_pipeline
    from dctnet.train.recipe import RecipeError, load_recipe

    for inp in ("dct", "rgb"):
        r = load_recipe(write_recipe(tmp_path / inp, str(folder.parent), batch_size=4, data__train=folder.name,
                                     data__val=folder.name, data__repeated_aug=3, model__input=inp,
                                     **({"model__stem": None} if inp == "rgb" else {})))
        pipe = build_pipeline(r, torch.device("cpu"))
        sampler = pipe.train_loader.sampler
        assert isinstance(sampler, D.RepeatedAugSampler) and sampler.repeats == 3 and len(sampler) == 39
        assert sampler.keys
    with pytest.raises(RecipeError, match=r"write data\.repeated_aug"):
        load_recipe(None, {"data": {"ra_reps": 4}})
    with pytest.raises(RecipeError, match=r"data\.repeated_aug must be in"):
        load_recipe(None, ["data.repeated_aug=0"])
