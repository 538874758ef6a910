"""Every JPEG layout on the fast path: the host slices native planes, the device decodes each
layout group. Oracle: Pillow's decode of the same file followed by torchvision's
``resized_crop`` of the same box (the exact decode must give Pillow's very pixels)."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
import torchvision.transforms.v2.functional as TVF
from PIL import Image

import dctnet
from dctnet import data as D
from dctnet import transforms as T
from dctnet.data.plan import GATHER_ITEM, PLAN_ROW
from dctnet.synthetic import synthetic_image

from conftest import CORPUS, corpus_rows, imagenette_files

# (name, Pillow save arguments, how to convert the RGB photo first)
LAYOUTS = [
    ("4:2:0", {"subsampling": "4:2:0"}, "RGB"),
    ("4:4:4", {"subsampling": "4:4:4"}, "RGB"),
    ("4:2:2", {"subsampling": "4:2:2"}, "RGB"),
    ("gray", {}, "L"),
    ("progressive", {"subsampling": "4:2:0", "progressive": True}, "RGB"),
    ("cmyk", {}, "CMYK"),
    ("4:4:4-q100", {"subsampling": "4:4:4", "quality": 100}, "RGB"),
]


def source_photos(n: int) -> list[np.ndarray]:
    """Real photos (Imagenette val) when at hand, else generated ones; odd sizes included."""
    files = imagenette_files("val", every=300)[:n]
    if files:
        out = []
        for k, f in enumerate(files):
            with Image.open(f) as im:
                rgb = np.asarray(im.convert("RGB"))
            out.append(rgb[: rgb.shape[0] - 7 * (k % 3), : rgb.shape[1] - 5 * (k % 2)])  # sizes off the MCU grid
        return out
    rng = np.random.default_rng(0)
    return [synthetic_image(rng, 150 + 13 * k, 170 - 9 * k) for k in range(n)]


def encode(rgb: np.ndarray, kwargs: dict, mode: str) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(rgb).convert(mode).save(buf, "JPEG", **{"quality": 92, **kwargs})
    return buf.getvalue()


@pytest.fixture(scope="module")
def layout_folder(tmp_path_factory):
    """Each photo re-encoded in every layout with Pillow, interleaved in one class folder."""
    root = tmp_path_factory.mktemp("layouts")
    (root / "all").mkdir()
    for k, rgb in enumerate(source_photos(4)):
        for name, kwargs, mode in LAYOUTS:
            (root / "all" / f"{k}-{name}.jpg").write_bytes(encode(rgb, kwargs, mode))
    return root


def pillow_crops(paths: list[str], boxes: np.ndarray, size: tuple[int, int]) -> torch.Tensor:
    out = []
    for path, box in zip(paths, boxes.tolist()):
        with Image.open(path) as im:
            ref = torch.from_numpy(np.array(im.convert("RGB"))).permute(2, 0, 1).double() / 255
        out.append(TVF.resized_crop(ref, *box, list(size), antialias=True).clamp(0, 1))
    return torch.stack(out)


@pytest.mark.parametrize("exact", [True, False])
@pytest.mark.parametrize("source", ["folder", "dense", "sparse", "sparse-device"])
def test_mixed_layout_batches_equal_pillow_then_resized_crop(layout_folder, tmp_path, exact, source):
    """One batch holds every layout (a group each); after the device decode the crops are in
    sample order and equal Pillow + torchvision's resized_crop: bit-exact decode (float rounding
    of the resize only) with ``exact``, within a few grey levels with the float decode."""
    crop = D.RandomResizedCrop()
    folder_ds = D.ImageFolderDataset(layout_folder, crop=crop, seed=5)
    if source == "folder":
        ds = folder_ds
    else:
        cache = D.build_cache(layout_folder, tmp_path / "c", format="dense" if source == "dense" else "sparse",
                              progress=False)
        ds = D.CacheDataset(cache, crop=crop, seed=5)
    keys = [(0, i) for i in range(len(ds))]
    if source == "sparse-device":
        batch = T.expand_sparse(ds.cache.gather_compressed(keys, crop, 5, ds.targets))
    elif source == "folder":
        batch = D.collate(ds.load_batch(keys), pin_memory=False)
    else:
        batch = ds.load_collated(keys)
    assert len(batch.groups) == len({(g.color_space, g.sampling) for g in batch.groups}) >= 5
    assert batch.index.tolist() == list(range(len(ds)))
    ours = T.crops_to_rgb(batch, (96, 112), exact=exact).double()
    paths = [p for p, _ in folder_ds.samples]
    heights = np.array([dctnet.read_header(p).height for p in paths])
    widths = np.array([dctnet.read_header(p).width for p in paths])
    boxes = D.draw_boxes(crop, heights, widths, 5, 0, np.arange(len(paths)))
    want = pillow_crops(paths, boxes, (96, 112))
    err = (ours - want).abs().amax(dim=(1, 2, 3)) * 255
    mean = (ours - want).abs().mean(dim=(1, 2, 3)) * 255
    if exact:
        assert err.max() < 0.01, {paths[i]: float(err[i]) for i in torch.argsort(err, descending=True)[:5]}
    else:
        assert err.max() <= 4 and mean.max() < 0.5, (err.max(), mean.max())


def test_the_same_batch_from_folder_and_caches(layout_folder, tmp_path):
    """The cache gathers (dense copy, sparse expansion in C, sparse expansion on the device) give
    the folder loader's batch bit for bit, every layout group included."""
    crop = D.RandomResizedCrop()
    ds = D.ImageFolderDataset(layout_folder, crop=crop, seed=2)
    keys = [(1, i) for i in range(len(ds))]
    ref = D.collate(ds.load_batch(keys), pin_memory=False)
    for fmt in ("dense", "sparse"):
        cds = D.CacheDataset(D.build_cache(layout_folder, tmp_path / fmt, format=fmt, progress=False), crop=crop, seed=2)
        got = [cds.load_collated(keys)]
        if fmt == "sparse":
            got.append(T.expand_sparse(cds.cache.gather_compressed(keys, crop, 2, cds.targets)))
        # device_expand: packed windows (dense) or compressed records (sparse), finished by the
        # prefetcher on the batch's device (here the CPU) — the same JpegBatch
        dev = D.CacheDataset(cds.cache.path, crop=crop, seed=2, device_expand=True)
        raw = dev.load_collated(keys)
        assert isinstance(raw, T.PackedJpegBatch if fmt == "dense" else T.SparseJpegBatch)
        if fmt == "dense":  # only the windows travel: fewer blocks than the padded planes
            assert raw.blocks.shape[0] < sum(p.shape[0] * p.shape[1] * p.shape[2] for g in ref.groups for p in g.planes)
        got.append(T.as_jpeg_batch(raw))
        loader = D.ThreadLoader(dev, len(keys), sampler=[(1, i) for i in range(len(ds))], pin_memory=False)
        got += list(D.DevicePrefetcher(loader, "cpu"))
        for b in got:
            assert isinstance(b, T.JpegBatch)
            assert [g.layout for g in b.groups] == [g.layout for g in ref.groups]
            for x, y in zip(b.tensors(), ref.tensors()):
                assert torch.equal(x, y)


def test_dct_domain_outputs_for_every_layout(layout_folder):
    """crops_to_coefficients: the upsampled coefficient image is the forward DCT of the RGB crops;
    native (y, c) has 4:2:0 chroma equal to the 2×2 box mean of the upsampled chroma's pixels
    (numpy float maths as the oracle)."""
    ds = D.ImageFolderDataset(layout_folder, crop=D.RandomResizedCrop(), seed=1)
    batch = D.collate(ds.load_batch([(0, i) for i in range(len(ds))]), pin_memory=False)
    x = T.crops_to_coefficients(batch, (32, 48))
    y, c = T.crops_to_coefficients(batch, (32, 48), chroma="native")
    assert x.shape == (len(ds), 3, 4, 6, 64) and y.shape == (len(ds), 4, 6, 64) and c.shape == (len(ds), 2, 2, 3, 64)
    assert torch.equal(y, x[:, 0])
    dct = np.array([[np.sqrt((1 if u == 0 else 2) / 8) * np.cos((2 * i + 1) * u * np.pi / 16) for i in range(8)]
                    for u in range(8)])
    xc = x[:, 1:].double().numpy().reshape(len(ds), 2, 4, 6, 8, 8)
    pix = np.einsum("vy,...vu,ux->...yx", dct, xc, dct)                        # per block pixels
    pix = pix.transpose(0, 1, 2, 4, 3, 5).reshape(len(ds), 2, 32, 48)
    box = pix.reshape(len(ds), 2, 16, 2, 24, 2).mean(axis=(3, 5))
    blocks = box.reshape(len(ds), 2, 2, 8, 3, 8).transpose(0, 1, 2, 4, 3, 5)
    want = np.einsum("vy,...yx,ux->...vu", dct, blocks, dct).reshape(len(ds), 2, 2, 3, 64)
    np.testing.assert_allclose(c.double().numpy(), want, atol=1e-3)
    with pytest.raises(ValueError, match="multiple of 16"):
        T.crops_to_coefficients(batch, (24, 48), chroma="native")


def readable_corpus_rows() -> list[dict]:
    rows = [r for r in corpus_rows() if r["libjpeg_coef"] == "ok" and r["pillow_decode"] == "ok"]
    return [pytest.param(r, id=r["file"]) for r in rows] or [pytest.param(None, marks=pytest.mark.skip("no corpus"))]


@pytest.mark.parametrize("row", readable_corpus_rows())
def test_corpus_files_through_the_loader_equal_pillow(row):
    """Every corpus file libjpeg and Pillow both read, through the folder loader's windows and the
    device decode: the exact crops equal Pillow's (where libjpeg can decode the layout at all)."""
    path = str(CORPUS / "files" / row["file"])
    c = dctnet.read_coefficients(path)
    hmax, vmax = c.max_sampling
    if any(hmax % h or vmax % v for h, v in c.sampling):
        pytest.skip("non-integer sampling ratio: libjpeg cannot decode it to pixels")
    crop = D.RandomResizedCrop(scale=(0.3, 1.0))
    samples = [D.sample_from_coefficients(c, crop, 0, i, seed=3, epoch=0) for i in range(3)]
    batch = D.collate(samples, pin_memory=False)
    size = (40, 48)
    ours = T.crops_to_rgb(batch, size, exact=True).double()
    boxes = D.draw_boxes(crop, np.full(3, c.height), np.full(3, c.width), 3, 0, np.arange(3))
    want = pillow_crops([path] * 3, boxes, size)
    err = float((ours - want).abs().max() * 255)
    assert err < 0.01, (row["file"], c.subsampling, c.color_space, err)


def test_gray_does_not_pay_for_chroma(layout_folder):
    """A grayscale sample carries one plane, not zero chroma planes."""
    ds = D.ImageFolderDataset(layout_folder)
    batch = D.collate(ds.load_batch([(0, i) for i in range(len(ds))]), pin_memory=False)
    gray = batch.group("gray", ((1, 1),))
    assert gray is not None and len(gray.planes) == 1
    cmyk = [g for g in batch.groups if g.color_space in ("CMYK", "YCCK")]
    assert cmyk and all(len(g.planes) == 4 for g in cmyk)


def test_folder_batches_collated_in_c_equal_the_per_sample_path(layout_folder, tmp_path):
    """ImageFolderDataset.load_collated (one GIL-free read, one C window copy per layout group)
    gives collate(load_batch(...)) bit for bit, for every layout, a fixed grid, and bad files
    under both policies."""
    import shutil

    root = tmp_path / "with-bad"
    shutil.copytree(layout_folder, root)
    (root / "all" / "zz-bad.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    for on_error in ("skip", "raise"):
        ds = D.ImageFolderDataset(root, crop=D.RandomResizedCrop(), seed=4, on_error=on_error)
        keys = [(2, i) for i in range(len(ds))]
        if on_error == "raise":
            with pytest.raises(dctnet.JpegError, match="zz-bad"):
                ds.load_collated(keys)
            continue
        for grid in (None, (40, 40)):
            a = ds.load_collated(keys, grid=grid)
            b = D.collate(ds.load_batch(keys), grid=grid, pin_memory=False)
            assert [g.layout for g in a.groups] == [g.layout for g in b.groups]
            assert all(torch.equal(x, y) for x, y in zip(a.tensors(), b.tensors()))
            assert [s[1] for s in a.skipped] == [s[1] for s in b.skipped] and len(a.skipped) == 1


def test_stopping_the_entropy_decode_early_is_a_benchmark_knob_only():
    """time_read's stop_rows (benchmarks/below_floor.py) times a decode cut after N MCU rows; it
    must not leak into later calls on the same thread."""
    from dctnet import _jpeg
    from dctnet.synthetic import synthetic_jpeg

    data = synthetic_jpeg(0, 256, 256)
    before = dctnet.read_coefficients(data)
    assert len(_jpeg.time_read(data, 2, 3)) == 2 and len(_jpeg.time_read(data, 1, 10**6)) == 1
    after = dctnet.read_coefficients(data)
    assert all(np.array_equal(a, b) for a, b in zip(before.planes, after.planes))
    assert after.planes[0][-1].any()  # the last rows are decoded again


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_mixed_layout_device_decode_on_cuda(layout_folder):
    """The mixed-layout batch through the prefetcher to CUDA: exact crops equal the CPU's (and so
    Pillow's), under bf16 autocast too; native (y, c) agrees with the CPU to float rounding."""
    ds = D.ImageFolderDataset(layout_folder, crop=D.RandomResizedCrop(), seed=6)
    loader = D.ThreadLoader(ds, len(ds), threads=2)
    cpu_batch = next(iter(D.ThreadLoader(ds, len(ds), threads=2, pin_memory=False)))
    want = T.crops_to_rgb(cpu_batch, (64, 64), exact=True)
    (gpu,) = list(D.DevicePrefetcher(loader, "cuda"))
    assert all(t.is_cuda for t in gpu.tensors())
    with torch.autocast("cuda", dtype=torch.bfloat16):
        got = T.crops_to_rgb(gpu, (64, 64), exact=True)
    assert (got.float().cpu() - want).abs().max() * 255 < 0.01
    y, c = T.crops_to_coefficients(gpu, (64, 64), chroma="native")
    y0, c0 = T.crops_to_coefficients(cpu_batch, (64, 64), chroma="native")
    torch.testing.assert_close(y.cpu(), y0, atol=2e-2, rtol=1e-4)
    torch.testing.assert_close(c.cpu(), c0, atol=2e-2, rtol=1e-4)


def _window_item(h, windows: list[tuple[int, int, int, int]], part: int = 0) -> np.ndarray:
    """A gather item for the file of header ``h`` with one window per component (in blocks)."""
    item = np.zeros(1, GATHER_ITEM)
    item["part"], item["ncomp"] = part, h.num_components
    for c, ((bh, bw), (r0, r1, c0, c1)) in enumerate(zip(h.blocks, windows)):
        item["bh"][0, c], item["bw"][0, c] = bh, bw
        item["r0"][0, c], item["r1"][0, c], item["c0"][0, c], item["c1"][0, c] = r0, r1, c0, c1
    return item


def _decode_window_planes(data: bytes, windows: list[tuple[int, int, int, int]], pad: tuple[int, int],
                          warn_mode: int = 0):
    """``_jpeg.decode_windows`` of one file with one window per component (in blocks), into outputs
    ``pad`` blocks larger than the window; raises the file's failure."""
    from dctnet import _jpeg

    item = _window_item(dctnet.read_header(data), windows)
    outs = [np.full((1, r1 - r0 + pad[0], c1 - c0 + pad[1], 64), 7, np.int16)  # stale data
            for r0, r1, c0, c1 in windows]
    [failure] = _jpeg.decode_windows([data], item, outs, warn_mode, 0, 0)
    if failure is not None:
        assert all(not o.any() for o in outs)  # a failed image leaves zero windows
        raise failure
    return outs


def _expected_window(plane: np.ndarray, window: tuple[int, int, int, int], shape: tuple[int, ...]) -> np.ndarray:
    """numpy: the window of a full plane at the top left of zeros (clipped to the plane)."""
    r0, r1, c0, c1 = window
    part = plane[r0:r1, c0:c1]
    out = np.zeros(shape, np.int16)
    out[: part.shape[0], : part.shape[1]] = part
    return out


def stream_cases() -> list:
    """Files that take each decode path: single-scan files of every layout (streamed), a
    non-interleaved sequential file (decoded in full), progressive, truncated baseline (rows
    past the end are zero) and arithmetic-coded corpus files."""
    rng = np.random.default_rng(5)
    photo = source_photos(1)[0]
    cases = [pytest.param(encode(photo, kw, mode), id=name) for name, kw, mode in LAYOUTS]
    for row in corpus_rows():
        name = row["file"]
        if row["libjpeg_coef"] in ("ok", "warning") and any(
                k in name for k in ("noninterleaved", "trunc_baseline", "arith", "1x4", "no_eoi", "restart")):
            cases.append(pytest.param((CORPUS / "files" / name).read_bytes(), id=name))
    del rng
    return cases


@pytest.mark.parametrize("data", stream_cases())
def test_windows_streamed_from_the_decode_equal_the_full_planes(data):
    """decode_windows writes each component's window straight from the entropy decode (one MCU
    row of scratch, stopping after the window's last row): equal to the full planes of
    read_coefficients sliced in numpy, with everything else in the output zeroed, for windows
    at the corners, in the middle, a single block, empty and past the plane's edge."""
    full = dctnet.read_coefficients(data)
    rows, cols = full.mcu
    rng = np.random.default_rng(len(data))
    picks = [(0, rows, 0, cols), (0, 1, 0, 1), (rows - 1, rows, cols - 1, cols), (0, 0, 0, 0),
             (rows - 1, rows + 2, 0, cols + 3)]
    for _ in range(6):
        r0, c0 = int(rng.integers(rows)), int(rng.integers(cols))
        picks.append((r0, int(rng.integers(r0, rows)) + 1, c0, int(rng.integers(c0, cols)) + 1))
    for r0, r1, c0, c1 in picks:
        windows = [(r0 * v, r1 * v, c0 * h, c1 * h) for h, v in full.sampling]
        for pad in ((0, 0), (2, 3)):
            outs = _decode_window_planes(data, windows, pad)
            for plane, window, out in zip(full.planes, windows, outs):
                assert np.array_equal(out[0], _expected_window(plane, window, out.shape[1:])), \
                    ((r0, r1, c0, c1), pad, full.subsampling, full.process)


def test_a_file_with_its_scan_twice_fails_or_decodes_as_in_full():
    """A malformed sequential file whose scan appears twice: with windows down to the last row
    the stream reaches the second scan and gives what the full decode gives — the same error
    (libjpeg refuses the scan) or the same planes. A window ending above the damage stops
    before it, like any early-stopped decode."""
    from dctnet.synthetic import synthetic_jpeg

    data = synthetic_jpeg(1, 96, 128)
    sos = data.index(b"\xff\xda")
    doubled = data[:-2] + data[sos:-2] + b"\xff\xd9"  # the scan again before EOI
    h = dctnet.read_header(doubled)
    windows = [(0, bh, 0, bw) for bh, bw in h.blocks]
    try:
        full = dctnet.read_coefficients(doubled)
    except dctnet.JpegError as exc:
        with pytest.raises(dctnet.JpegError) as info:
            _decode_window_planes(doubled, windows, (0, 0), warn_mode=1)  # read_coefficients' policy
        assert info.value.reason == exc.reason
    else:
        outs = _decode_window_planes(doubled, windows, (1, 1))
        for plane, window, out in zip(full.planes, windows, outs):
            assert np.array_equal(out[0], _expected_window(plane, window, out.shape[1:]))
    top = [(0, v, 0, bw) for (bh, bw), (_, v) in zip(h.blocks, h.sampling)]
    first = _decode_window_planes(doubled, top, (0, 0))
    good = dctnet.read_coefficients(data)
    for plane, window, out in zip(good.planes, top, first):
        assert np.array_equal(out[0], _expected_window(plane, window, out.shape[1:]))


def _damaged_at_the_top(seed: int, h: int, w: int) -> bytes:
    """A baseline JPEG whose entropy-coded data is cut by a marker in its first MCU row: its header
    reads, every windowed decode meets the damage (libjpeg: premature end of data segment, lost data)."""
    from dctnet.synthetic import synthetic_jpeg

    data = synthetic_jpeg(seed, h, w)
    sos = data.index(b"\xff\xda")
    start = sos + 2 + int.from_bytes(data[sos + 2:sos + 4], "big")
    return data[:start + 8] + b"\xff\xd9" + data[start + 10:]


def test_decode_windows_returns_each_failed_items_reason_and_goes_on(tmp_path):
    """decode_windows decodes every item: one that fails gets its exception in the returned list
    (JpegError with the reason a full read gives, naming the path it was given) and zero windows,
    and the items after it are decoded as usual. An item that does not fit the call (its part, its
    component count or windows) is a caller's bug: ValueError naming the item, before any decode."""
    from dctnet import _jpeg
    from dctnet.synthetic import synthetic_jpeg

    good = [synthetic_jpeg(i, 48, 64) for i in (1, 2)]
    bad_path = tmp_path / "bad.jpg"
    bad_path.write_bytes(_damaged_at_the_top(3, 48, 64))
    srcs = [good[0], str(bad_path), good[1]]
    h = dctnet.read_header(good[0])
    assert dctnet.read_header(bad_path).blocks == h.blocks
    windows = [(0, bh, 0, bw) for bh, bw in h.blocks]
    items = np.concatenate([_window_item(h, windows, part) for part in range(3)])
    outs = [np.full((3, bh, bw, 64), 7, np.int16) for bh, bw in h.blocks]
    found = _jpeg.decode_windows(srcs, items, outs, _jpeg.WARN_LOST, 0, 0)
    with pytest.raises(dctnet.JpegError) as info:
        dctnet.read_coefficients(bad_path)
    assert found[0] is None and found[2] is None and isinstance(found[1], dctnet.JpegError)
    assert (found[1].reason, found[1].source) == (info.value.reason, str(bad_path))
    for i, k in ((0, 0), (2, 1)):
        want = dctnet.read_coefficients(good[k]).planes
        assert all(np.array_equal(o[i], p) for o, p in zip(outs, want))
    assert all(not o[1].any() for o in outs)
    assert _jpeg.decode_windows(srcs, items, outs, _jpeg.WARN_ACCEPT, 0, 0) == [None] * 3  # the fill-in
    for col, value in (("part", 3), ("ncomp", 1), ("r1", 1 << 20)):
        bad = items.copy()
        bad[col][2] = value
        with pytest.raises(ValueError, match="decode_windows") as info:
            _jpeg.decode_windows(srcs, bad, outs, 0, 0, 0)
        assert info.value.args[1] == 2


def test_a_file_failing_in_its_window_decode_is_reported_under_on_error(tmp_path):
    """A file whose header reads but whose windows do not decode: load_collated reports it itself
    under on_error — raised as the per-sample read raises it, or left out of the batch (which is
    planned again without it: here it is the largest image, so the grid shrinks) and listed in
    skipped with that reason — and the batch equals collate(load_batch(keys)) bit for bit."""
    from dctnet.synthetic import synthetic_jpeg

    root = tmp_path / "folder"
    (root / "a").mkdir(parents=True)
    for i in range(4):
        (root / "a" / f"{i}.jpg").write_bytes(synthetic_jpeg(i, 40 + 8 * i, 56))
    (root / "a" / "2.jpg").write_bytes(_damaged_at_the_top(7, 160, 200))
    bad = str(root / "a" / "2.jpg")
    with pytest.raises(dctnet.JpegError) as want:
        dctnet.read_coefficients(bad)
    keys = [(0, i) for i in range(4)]
    for crop in (D.FullImage(), D.RandomResizedCrop()):
        raising = D.ImageFolderDataset(root, crop=crop, seed=2)
        with pytest.raises(dctnet.JpegError) as got:
            raising.load_collated(keys)
        assert (got.value.reason, got.value.source) == (want.value.reason, bad)
        skipping = D.ImageFolderDataset(root, crop=crop, seed=2, on_error="skip")
        a = skipping.load_collated(keys)
        b = D.collate(skipping.load_batch(keys), pin_memory=False)
        assert a.skipped == b.skipped == ((2, bad, str(want.value)),)
        assert [g.layout for g in a.groups] == [g.layout for g in b.groups]
        assert all(torch.equal(x, y) for x, y in zip(a.tensors(), b.tensors()))
        assert sorted(a.index.tolist()) == [0, 1, 3]


def test_read_headers_table_matches_read_header(layout_folder, tmp_path):
    """read_headers (the batch path's one pass over the files) gives each file's header fields
    as read_header does, and the exception a per-file read would raise for bad or missing files
    and FIFOs, naming the file."""
    import os

    from dctnet import _jpeg
    from dctnet.data.plan import COLOR_SPACES, HEADER_ROW

    paths = sorted(str(p) for p in layout_folder.rglob("*.jpg"))
    bad = tmp_path / "bad.jpg"
    bad.write_bytes(b"\xff\xd8 nope")
    fifo = tmp_path / "fifo.jpg"
    os.mkfifo(fifo)
    srcs = paths + [str(bad), str(tmp_path / "missing.jpg"), str(fifo)]
    table, errors, files = _jpeg.read_headers(srcs, 0, 0, 0)
    head = np.frombuffer(table, HEADER_ROW)
    assert len(head) == len(files) == len(srcs)
    for row, err, p in zip(head[: len(paths)], errors, paths):
        h = dctnet.read_header(p)
        assert err is None and row["status"] == 0
        assert (row["height"], row["width"], row["ncomp"]) == (h.height, h.width, h.num_components)
        assert COLOR_SPACES[row["color"]] == h.color_space and row["progressive"] == h.progressive
        assert row["nbytes"] == h.nbytes and row["exif"] == (h.exif_orientation or 0)
        nc = h.num_components
        assert [tuple(x) for x in row["sampling"][:nc].tolist()] == list(h.sampling)
        assert [tuple(x) for x in row["blocks"][:nc].tolist()] == list(h.blocks)
        assert not row["sampling"][nc:].any() and not row["blocks"][nc:].any()
    assert (head["status"][len(paths):] == 1).all()
    assert isinstance(errors[-3], dctnet.JpegError) and "bad.jpg" in str(errors[-3])
    assert isinstance(errors[-2], FileNotFoundError) and "missing.jpg" in str(errors[-2])
    assert isinstance(errors[-1], OSError) and "regular file" in str(errors[-1])
    with pytest.raises(TypeError):
        _jpeg.read_headers([b"bytes"], 0, 0, 0)
    with pytest.raises(ValueError):
        _jpeg.read_headers(paths, 0, -1, 0)


def _plan_in_numpy(color, ncomp, samp, h, w, boxes):
    """The batch plan in plain numpy (crop.mcu_windows per sample, groups by first appearance)."""
    used = np.arange(4)[None, :] < ncomp[:, None]
    s = np.where(used[:, :, None], samp, 0)
    mh, mw = 8 * s[:, :, 1].max(axis=1), 8 * s[:, :, 0].max(axis=1)
    win = D.mcu_windows(boxes, h, w, (mh, mw))
    keys = [(int(color[i]), int(ncomp[i]), tuple(map(tuple, s[i]))) for i in range(len(h))]
    order = list(dict.fromkeys(keys))
    group = np.array([order.index(k) for k in keys])
    valid = np.stack([np.minimum(h - mh * win[:, 0], mh * (win[:, 1] - win[:, 0])),
                      np.minimum(w - mw * win[:, 2], mw * (win[:, 3] - win[:, 2]))], axis=1)
    rel = np.stack([boxes[:, 0] - mh * win[:, 0], boxes[:, 1] - mw * win[:, 2], boxes[:, 2], boxes[:, 3]], axis=1)
    pwin = np.stack([win[:, 0:1] * s[:, :, 1], win[:, 1:2] * s[:, :, 1], win[:, 2:3] * s[:, :, 0],
                     win[:, 3:4] * s[:, :, 0]], axis=1)
    return win, pwin, valid, rel, group


def test_batch_plan_equals_the_numpy_arithmetic():
    """plan_batch (one C call) gives the windows, plane windows, valid sizes, relative boxes and
    layout groups of the per-sample numpy arithmetic, for random layouts (1/3/4 components, any
    factors 1..4, garbage in unused slots), sizes, and boxes partly or wholly outside the image."""
    from dctnet.data.plan import plan_batch

    rng = np.random.default_rng(11)
    for trial in range(40):
        n = int(rng.integers(1, 70))
        ncomp = rng.choice([1, 3, 4], n)
        kinds = rng.integers(1, 5, (3, 4, 2))  # three layouts to draw from, so groups repeat
        samp = kinds[rng.integers(0, 3, n)]
        samp[np.arange(4)[None, :] >= ncomp[:, None]] = rng.integers(0, 9)  # unused slots hold anything
        color = rng.integers(0, 6, n)
        h, w = rng.integers(1, 700, n), rng.integers(1, 700, n)
        # boxes overlapping the image, partly outside it as well
        bh, bw = rng.integers(1, 400, n), rng.integers(1, 400, n)
        top, left = rng.integers(-bh + 1, h), rng.integers(-bw + 1, w)
        boxes = np.stack([top, left, bh, bw], axis=1)
        plan = plan_batch(color, ncomp, samp, h, w, boxes)
        win, pwin, valid, rel, group = _plan_in_numpy(color, ncomp, samp, h, w, boxes)
        assert np.array_equal(plan.win, win) and np.array_equal(plan.pwin, pwin)
        assert np.array_equal(plan.valid, valid) and np.array_equal(plan.rel, rel)
        got = np.empty(n, np.int64)
        for g, r in enumerate(plan.rows):
            got[r] = g
            windows = np.stack([win[r, 1] - win[r, 0], win[r, 3] - win[r, 2]], axis=1)
            assert plan.grids[g] == tuple(np.maximum(windows.max(axis=0), 1))
        assert np.array_equal(got, group)
        j = int(plan.rows[0][0])
        assert plan.layouts[0][1] == tuple(map(tuple, samp[j, : ncomp[j]]))
    with pytest.raises(ValueError, match="does not fit the fixed grid"):
        plan_batch([3], [3], [[[2, 2], [1, 1], [1, 1], [0, 0]]], [224], [224], [[0, 0, 224, 224]], grid=(4, 4))
    for bad in ({"ncomp": [2]}, {"h": [0]}, {"samp": [[[5, 1], [1, 1], [1, 1], [0, 0]]]}, {"box": [[1 << 40, 0, 1, 1]]},
                {"box": [[0, 0, 0, 8]]}, {"box": [[64, 0, 8, 8]]}, {"box": [[-8, 0, 8, 8]]}):
        args = dict(ncomp=[3], h=[64], samp=[[[2, 2], [1, 1], [1, 1], [0, 0]]], box=[[0, 0, 8, 8]]) | bad
        with pytest.raises(ValueError, match="out of range"):
            plan_batch([3], args["ncomp"], args["samp"], args["h"], [64], args["box"])


def test_c_planning_entries_refuse_misaligned_buffers_and_bad_crop_parameters():
    """int64 buffers handed to C must be aligned (else undefined behaviour), and crop parameters
    that would make the box arithmetic undefined (NaN, negative ratios, sizes past 2^31) are
    refused before they reach it."""
    from dctnet import _jpeg

    one = np.zeros(1, np.int64)
    raw = bytearray(8 * 40 + 8)
    off = memoryview(raw)[1:1 + 8]  # one int64, misaligned
    with pytest.raises(ValueError, match="aligned"):
        _jpeg.rrc_boxes(0, 0, off, one + 5, one + 5, 0.1, 1.0, 0.75, 1.33, -0.29, 0.29, np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="1..2"):
        _jpeg.rrc_boxes(0, 0, one, one + (1 << 40), one + 5, 0.1, 1.0, 0.75, 1.33, -0.29, 0.29, np.zeros(4, np.int64))
    args = [one + 3, one + 3, np.zeros(8, np.int64), one + 8, one + 8, np.array([0, 0, 8, 8], np.int64)]
    outs = [np.zeros(1, PLAN_ROW), np.zeros(1, np.int64), np.zeros(2, np.int64)]
    args[2][:6] = 1  # 4:4:4
    assert _jpeg.plan_windows(*args, 2, *outs) == 1
    bad = memoryview(bytearray(PLAN_ROW.itemsize + 1))[1:]
    with pytest.raises(ValueError, match="aligned"):
        _jpeg.plan_windows(*args, 2, bad, *outs[1:])
    for scale, ratio in (((0.1, float("nan")), (0.75, 1.33)), ((0.1, 1.0), (-1.0, 1.0)), ((0.0, 1.0), (0.75, 1.33))):
        with pytest.raises(ValueError, match="positive finite"):
            D.RandomResizedCrop(scale=scale, ratio=ratio)
