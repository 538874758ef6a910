"""Run files on disk fail cleanly: a full disk at the checkpoint (writing into /dev/full), a disk
too small for the checkpoint found after the first step, an output folder that cannot be created,
a damaged last.pt under --resume — each one `error:` line naming the path and the reason, exit 1,
no traceback, no partial file left behind."""

from __future__ import annotations

import errno
import os
import subprocess
from collections import namedtuple

import pytest
import torch

from dctnet.train.checkpoint_file import read_checkpoint, state_bytes, write_checkpoint

from conftest import write_recipe

pytestmark = pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full (Linux)")


@pytest.fixture(scope="module")
def shapes(tmp_path_factory):
    from dctnet.synthetic import make_labelled_dataset

    root = tmp_path_factory.mktemp("shapes")
    return make_labelled_dataset(str(root), classes=2, train_per_class=16, val_per_class=4, size=(32, 48), seed=1)


def _dctnet(capsys, *args: str) -> subprocess.CompletedProcess:
    """``dctnet ARGS`` in this process (``cli.main``): its exit code and output; an exception that
    escapes main is a traceback a user would see, and fails here."""
    from dctnet import cli

    capsys.readouterr()
    with pytest.raises(SystemExit) as code:
        cli.main(list(args))
    out = capsys.readouterr()
    return subprocess.CompletedProcess(args, code.value.code, out.out, out.err)


def _one_error_line(r: subprocess.CompletedProcess, *says: str) -> None:
    assert r.returncode == 1, r.stdout[-2000:] + r.stderr[-2000:]
    errors = [line for line in r.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and all(s in errors[0] for s in says), r.stderr[-2000:]


def test_a_full_disk_at_the_checkpoint_is_one_error_line_and_leaves_nothing(tmp_path):
    """The checkpoint's temporary file leads to /dev/full: every write fails with ENOSPC, as on a full disk."""
    path = tmp_path / "last.pt"
    (tmp_path / "last.tmp").symlink_to("/dev/full")
    with pytest.raises(OSError) as info:
        write_checkpoint({"w": torch.zeros(1000)}, path)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    assert not os.path.lexists(tmp_path / "last.tmp") and not path.exists()


def test_a_run_on_a_full_disk_stops_with_one_error_line(shapes, tmp_path, capsys):
    recipe = write_recipe(tmp_path, shapes, optim__epochs=1, train__max_steps=2, batch_size=8)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "last.tmp").symlink_to("/dev/full")
    r = _dctnet(capsys, "train", str(recipe))
    _one_error_line(r, str(tmp_path / "run" / "last.pt"), "No space left on device")
    assert not os.path.lexists(tmp_path / "run" / "last.tmp") and not (tmp_path / "run" / "last.pt").exists()


def test_too_little_room_for_the_checkpoint_stops_the_run_after_its_first_step(shapes, tmp_path, monkeypatch):
    """The free space is checked once the checkpoint's size is known (after a step), not after an epoch."""
    import shutil

    from dctnet.train import Trainer, load_recipe

    usage = namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda p: usage(1 << 30, (1 << 30) - (1 << 20), 1 << 20))
    t = Trainer(load_recipe(write_recipe(tmp_path, shapes, optim__epochs=1, train__max_steps=4, batch_size=8)))
    steps = []
    monkeypatch.setattr(t.sched, "step", lambda *a: steps.append(1))
    with pytest.raises(OSError, match="No space left on device: the checkpoint needs") as info:
        t.fit()
    assert info.value.filename == str(tmp_path / "run" / "last.pt") and len(steps) == 1


def test_an_output_folder_that_cannot_be_made_is_refused_at_start(shapes, tmp_path, capsys):
    (tmp_path / "file").write_text("not a folder")
    recipe = write_recipe(tmp_path, shapes, train__out=str(tmp_path / "file" / "run"))
    _one_error_line(_dctnet(capsys, "train", str(recipe)), str(tmp_path / "file"))


@pytest.mark.parametrize("damage", ["cut", "garbage", "empty"])
def test_a_damaged_last_pt_is_refused_saying_whether_an_older_one_exists(tmp_path, damage):
    path = tmp_path / "last.pt"
    write_checkpoint({"model": {"w": torch.arange(4096.0)}, "epoch": 0}, path)
    data = path.read_bytes()
    path.write_bytes({"cut": data[:len(data) // 2], "garbage": os.urandom(len(data)), "empty": b""}[damage])
    with pytest.raises(ValueError, match=r"is damaged or not a checkpoint .*no older checkpoint beside it"):
        read_checkpoint(path, "cpu")
    write_checkpoint({"epoch": 0}, tmp_path / "best.pt")
    with pytest.raises(ValueError, match=r"other checkpoints beside it: best.pt"):
        read_checkpoint(path, "cpu")


def test_resume_from_a_damaged_last_pt_is_one_error_line(shapes, tmp_path, capsys):
    recipe = write_recipe(tmp_path, shapes, optim__epochs=1, train__max_steps=1, batch_size=8)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "last.pt").write_bytes(b"PK\x03\x04 not really a zip")
    _one_error_line(_dctnet(capsys, "train", str(recipe), "--resume"), "damaged or not a checkpoint", "last.pt")


def test_every_command_maps_an_os_error_to_one_line(tmp_path, capsys, monkeypatch):
    """A command that meets an OSError it does not handle itself still prints `error: PATH: reason`."""
    from dctnet import cli

    def refused(args):
        raise PermissionError(errno.EACCES, "Permission denied", str(tmp_path / "x"))

    monkeypatch.setattr(cli, "cmd_stats", refused)
    real = cli.build_parser

    def parser():
        p = real()
        p._subparsers._group_actions[0].choices["stats"].set_defaults(func=refused)
        return p

    monkeypatch.setattr(cli, "build_parser", parser)
    _one_error_line(_dctnet(capsys, "stats", str(tmp_path), str(tmp_path / "out")), f"error: {tmp_path / 'x'}: Permission denied")


def test_state_bytes_counts_the_tensors():
    assert state_bytes({"a": torch.zeros(10), "b": [torch.zeros(2, dtype=torch.int64), 3], "c": None}) == 56


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 2 MiB tmpfs (a full disk for any checkpoint); skipped where mounting is not allowed (not root)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(mount)], capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], capture_output=True)


@pytest.mark.parametrize("precheck", [True, False])
def test_a_run_on_a_small_tmpfs_stops_with_one_error_line_and_leaves_no_checkpoint(shapes, tmp_path, capsys,
                                                                                  monkeypatch, small_tmpfs, precheck):
    """A real full file system: the free-space check after the first step refuses the run; without
    that check, the write itself fails (ENOSPC) and its partial file is removed."""
    if not precheck:  # neither the trainer's check after the first step nor the writer's own
        import dctnet.train.checkpoint_file as cf
        import dctnet.train.trainer as tr

        for module in (cf, tr):
            monkeypatch.setattr(module, "check_room", lambda path, nbytes: None)
    recipe = write_recipe(tmp_path, shapes, optim__epochs=1, train__max_steps=2, batch_size=8,
                          train__out=str(small_tmpfs / "run"))
    r = _dctnet(capsys, "train", str(recipe))
    _one_error_line(r, str(small_tmpfs / "run" / "last.pt"), "No space left on device")
    assert ("the checkpoint needs" in r.stderr) == precheck  # (which of the two stopped it)
    assert sorted(p.name for p in (small_tmpfs / "run").iterdir() if p.suffix in (".pt", ".tmp")) == []
