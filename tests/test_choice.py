"""torchvision v2's RandomChoice and RandomApply over dctnet transforms: the same draw law as
torchvision's own classes (chi-square on 10⁴ draws against theirs), per sample for per-sample ops
and once per batch for mixers (torchvision's reference calls ``RandomChoice([MixUp, CutMix])`` on the
collated batch), each sample's result exactly the chosen child's, label mass kept, and fixed shapes."""

from __future__ import annotations

import pytest
import torch
from torchvision.transforms import v2

from dctnet import transforms as T

from test_mixing_erasing import chi2_p

N = 4_000
P_MIN = 1e-3


class _Record(torch.nn.Module):
    def __init__(self, k: int, log: list) -> None:
        super().__init__()
        self.k, self.log = k, log

    def forward(self, *inputs):
        self.log.append(self.k)
        return inputs if len(inputs) > 1 else inputs[0]


def torchvision_choices(p, n: int) -> list[int]:
    log: list[int] = []
    tv = v2.RandomChoice([_Record(k, log) for k in range(len(p))], p=p)
    torch.manual_seed(0)
    for _ in range(n):
        tv(torch.zeros(1))
    return log


def counts(values, k: int) -> list[int]:
    return [sum(1 for v in values if v == i) for i in range(k)]


@pytest.mark.parametrize("p", [None, [0.2, 0.8], [1.0, 2.0, 5.0]])
def test_mixer_choice_is_per_batch_with_torchvisions_law(p):
    k = 2 if p is None else len(p)
    alphas = [0.2, 1.0, 0.5][:k]
    kids = [T.MixUp(a, num_classes=10) if i % 2 == 0 else T.CutMix(a, num_classes=10) for i, a in enumerate(alphas)]
    rc = T.RandomChoice(kids, p=p, seed=0)
    ours = []
    g = torch.Generator().manual_seed(1)
    for _ in range(N):
        params = rc.draw_params((8, 3, 16, 16), g)
        choice = params["choice"]
        assert (choice == choice[0]).all()  # one choice for the batch
        ours.append(int(choice[0]))
    theirs = torchvision_choices([1.0] * k if p is None else p, N)
    assert chi2_p([counts(ours, k), counts(theirs, k)]) > P_MIN


def test_each_sample_gets_exactly_the_chosen_childs_output_and_label_mass():
    mix, cut = T.MixUp(0.2, num_classes=10, seed=3), T.CutMix(1.0, num_classes=10, seed=4)
    rc = T.RandomChoice([mix, cut], seed=0)
    x, y = torch.rand(8, 3, 32, 32), torch.randint(0, 10, (8,))
    for s in range(6):
        params = rc.draw_params(x.shape, torch.Generator().manual_seed(s))
        out, target = rc(x, y, params=params)
        k = int(params["choice"][0])
        want, want_t = [mix, cut][k](x, y, params=params["children"][k])
        assert torch.equal(out, want) and torch.equal(target, want_t)
        assert torch.allclose(target.sum(1), torch.ones(8))
        # torchvision's pairing: sample i mixed with i − 1 (a roll by one)
        if k == 0:
            lam = float(params["children"][0]["lam"][0])
            assert torch.allclose(out, lam * x + (1 - lam) * x.roll(1, 0), atol=1e-6)


def test_per_sample_choice_and_apply_follow_torchvisions_law():
    x = torch.arange(2.0).reshape(1, 1, 1, 2).expand(4000, 3, 2, 2).contiguous()   # left 0, right 1
    rc = T.RandomChoice([T.RandomHorizontalFlip(p=1.0), T.RandomVerticalFlip(p=1.0)], p=[0.3, 0.7], seed=0)
    params = rc.draw_params(x.shape, torch.Generator().manual_seed(0))
    out = rc(x, params=params)
    flipped_h = out[:, 0, 0, 0] == 1
    assert torch.equal(flipped_h, params["choice"] == 0)  # each sample: exactly its chosen child
    ours = params["choice"].tolist()
    assert chi2_p([counts(ours, 2), counts(torchvision_choices([0.3, 0.7], 4000), 2)]) > P_MIN
    ra = T.RandomApply([T.RandomHorizontalFlip(p=1.0)], p=0.25, seed=0)
    assert "p=0.25" in repr(ra) and "p=[0.3, 0.7]" in repr(rc)  # what pipeline.txt shows
    out = ra(x, generator=torch.Generator().manual_seed(1))
    rate = float((out[:, 0, 0, 0] == 1).float().mean())
    torch.manual_seed(0)
    tv = v2.RandomApply([v2.RandomHorizontalFlip(p=1.0)], p=0.25)
    tv_rate = sum(float(tv(torch.tensor([[[0.0, 1.0]]]))[0, 0, 0]) for _ in range(4000)) / 4000
    assert abs(rate - 0.25) < 0.03 and abs(tv_rate - 0.25) < 0.03


def test_mixers_and_per_sample_ops_do_not_share_a_container():
    with pytest.raises(ValueError, match="cannot share"):
        T.RandomChoice([T.MixUp(0.2, num_classes=3), T.RandomHorizontalFlip()])


def test_recipe_random_choice_of_mixup_and_cutmix():
    """torchvision's reference line, in a recipe: the entry counts as the batch's mixer (last, even
    batch), and the rgb arm runs torchvision's own RandomChoice of its MixUp and CutMix."""
    from dctnet.train.baseline import baseline_mixing
    from dctnet.train.recipe import RecipeError, load_recipe

    entry = {"name": "RandomChoice", "transforms": [{"name": "MixUp", "alpha": 0.2}, {"name": "CutMix", "alpha": 1.0}]}
    r = load_recipe(None, {"model": {"input": "rgb"}, "augment": [{"name": "RandomHorizontalFlip"}, entry]})
    [mixer] = baseline_mixing(r, 10)
    assert isinstance(mixer, v2.RandomChoice)
    assert [type(t) for t in mixer.transforms] == [v2.MixUp, v2.CutMix] and mixer.transforms[0].alpha == 0.2
    with pytest.raises(RecipeError, match="must come last"):
        load_recipe(None, {"augment": [entry, {"name": "RandomHorizontalFlip"}]})
    built = T.build_transform(r.augment, num_classes=10, seed=0)
    assert isinstance(built.transforms[-1], T.RandomChoice) and built.transforms[-1].batch_level


def test_the_choice_runs_the_same_kernels_whatever_is_drawn():
    from test_fixed_shapes import OpRecorder

    rc = T.Compose([T.RandomChoice([T.MixUp(0.2, num_classes=10), T.CutMix(1.0, num_classes=10)])], seed=0)
    seqs = []
    for s in range(4):
        x, y = torch.rand(8, 3, 16, 16), torch.randint(0, 10, (8,))
        prepared = rc.prepare(rc.draw_params(x.shape, torch.Generator().manual_seed(s)), x.shape, x.device)
        with OpRecorder() as rec:
            rc.execute(x, y, prepared)
        seqs.append([(n, sh) for n, sh in rec.ops if "local_scalar" not in n and "min" not in n and "max" not in n])
    assert seqs[1] == seqs[2] == seqs[3]


def torchvision_orders(n_children: int, n: int) -> list[tuple[int, ...]]:
    """The orders torchvision's own RandomOrder runs its children in, ``n`` calls."""
    log: list[int] = []
    tv = v2.RandomOrder([_Record(k, log) for k in range(n_children)])
    torch.manual_seed(0)
    for _ in range(n):
        tv(torch.zeros(1))
    return [tuple(log[i:i + n_children]) for i in range(0, len(log), n_children)]


def test_random_order_follows_torchvisions_law_and_each_sample_runs_its_own_order():
    """Uniform over the 3! orders like torchvision's class (chi-square against its draws), drawn per
    sample; each sample's result is its children composed in its drawn order — checked against
    torchvision's own ops composed in that order, on ops that do not commute."""
    from itertools import permutations

    kids = [T.ColorJitter(brightness=(1.6, 1.6)), T.ColorJitter(contrast=(0.4, 0.4)), T.ColorJitter(hue=(0.2, 0.2))]
    ro = T.RandomOrder(kids, seed=0)
    orders = list(permutations(range(3)))
    params = ro.draw_params((6000, 3, 4, 4), torch.Generator().manual_seed(0))
    ours = [orders.index(tuple(o)) for o in params["order"].tolist()]
    theirs = [orders.index(o) for o in torchvision_orders(3, 6000)]
    assert chi2_p([counts(ours, 6), counts(theirs, 6)]) > P_MIN
    assert min(counts(ours, 6)) > 800  # every order occurs (1,000 expected)

    x = torch.rand(24, 3, 16, 16)
    params = ro.draw_params(x.shape, torch.Generator().manual_seed(1))
    out = ro(x, params=params)
    tv_ops = [v2.ColorJitter(brightness=(1.6, 1.6)), v2.ColorJitter(contrast=(0.4, 0.4)),
              v2.ColorJitter(hue=(0.2, 0.2))]
    seen = set()
    for b, order in enumerate(params["order"].tolist()):
        want = x[b]
        for k in order:
            want = tv_ops[k](want)
        seen.add(tuple(order))
        torch.testing.assert_close(out[b], want, atol=2e-6, rtol=0)
    assert len(seen) >= 4  # the orders differ within the batch
    results = []  # and the order matters: the six orders give six different images
    for order in orders:
        want = x[0]
        for k in order:
            want = tv_ops[k](want)
        results.append(want)
    assert all(not torch.allclose(a, b, atol=1e-3) for i, a in enumerate(results) for b in results[i + 1:])


def test_random_order_refuses_mixers_and_reads_from_a_recipe():
    with pytest.raises(ValueError, match="RandomChoice"):
        T.RandomOrder([T.MixUp(0.2, num_classes=3), T.CutMix(1.0, num_classes=3)])
    built = T.build_transform({"name": "RandomOrder", "transforms": [{"name": "RandomHorizontalFlip"},
                                                                     {"name": "ColorJitter", "brightness": 0.4}]},
                              num_classes=3, seed=0)
    assert isinstance(built, T.RandomOrder) and "n=2" in repr(built)
    from dctnet.train.recipe import load_recipe

    load_recipe(None, {"augment": [{"name": "RandomOrder", "transforms": [{"name": "RandomGrayscale"},
                                                                          {"name": "RandomVerticalFlip"}]}]})


def test_the_order_runs_the_same_kernels_whatever_is_drawn():
    from test_fixed_shapes import OpRecorder

    ro = T.Compose([T.RandomOrder([T.RandomHorizontalFlip(), T.ColorJitter(0.4, 0.4), T.RandomGrayscale(0.5)])],
                   seed=0)
    seqs = []
    for s in range(3):
        x = torch.rand(8, 3, 16, 16)
        prepared = ro.prepare(ro.draw_params(x.shape, torch.Generator().manual_seed(s)), x.shape, x.device)
        with OpRecorder() as rec:
            ro.execute(x, None, prepared)
        seqs.append(rec.ops)
    assert seqs[0] == seqs[1] == seqs[2]
