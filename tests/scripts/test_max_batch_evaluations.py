"""scripts/max_batch_evaluations.py: the searches of each set, its totals from a made-up memest
(a script that answers every search with 3 estimates, or with the symbolic backend by replay, and
refuses the memory-efficient ones) over the lm set's searches of two configs, and --check's
verdicts over a few searches (an answer at the search's limit has no successor)."""
import contextlib
import io
import pathlib
import stat
import sys
import tempfile
import unittest
from unittest import mock

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import max_batch_evaluations  # noqa: E402

FAKE = """#!/usr/bin/env python3
import json, sys
args = sys.argv[1:]
if "sdpa-mem-efficient" in args:
    print("memest: error: refused", file=sys.stderr)
    sys.exit(2)
if "--max-batch" not in args and "--max-dim" not in args:  # a plain estimate
    # The value bound last (the check appends it): a --batch, or a --dim NAME=V.
    at = max(i for i, x in enumerate(args) if x in ("--batch", "--dim"))
    value = int(args[at + 1].split("=")[-1])
    # Fits up to the answer; one past it when told to, or one short of it (the answer is then
    # wrong); fails outright when told to.
    if "--fail" in args:
        sys.exit(2)
    most = 7 + (1 if "--wrong" in args else 0) - (1 if "--short" in args else 0)
    print(json.dumps({"verdict": "fits" if value <= most else "does not fit"}))
    sys.exit(0)
extra = 1 if "--safety-margin" in args else 0
doc = {"results": [{"max_batch": {"batch": 7, "evaluations": 3 + extra}}]}
if "symbolic" in args:  # the replay: one estimate, 2 traces, 3 replays of 40 requests in all
    doc["results"][0]["max_batch"].update(evaluations=1, traces=2, replays=3, replayed_requests=40)
if "--at-limit" in args:  # a search whose limit is its answer
    doc["max_batch"] = {"limit": 7}
print(json.dumps(doc))
"""


class SetsTest(unittest.TestCase):
    def test_each_set_lists_its_searches(self):
        graphs = len(max_batch_evaluations.graphs())
        self.assertGreaterEqual(graphs, 85)  # 81 timm graphs and the bundled training ones
        self.assertEqual(len(list(max_batch_evaluations.searches("main"))), 3 * graphs)
        self.assertEqual(len(list(max_batch_evaluations.searches("options"))), 3 * graphs)
        configs = [p for p in (ROOT / "tests/data/hf").glob("*.json") if "t5" not in p.name]
        lm = list(max_batch_evaluations.searches("lm"))
        self.assertEqual(len(lm), 4 * len(configs))
        self.assertTrue(all(a[0] == "--hf-config" for _, a in lm))
        for other in ("lm-gpus", "lm-options"):  # three queries, each with both attentions
            searches = list(max_batch_evaluations.searches(other))
            self.assertEqual(len(searches), 6 * len(configs))
            self.assertEqual(len({label for label, _ in searches}), len(searches))


@contextlib.contextmanager
def fake_memest():
    """The made-up memest (FAKE) as an executable, for as long as the block runs."""
    with tempfile.TemporaryDirectory() as d:
        fake = pathlib.Path(d) / "memest"
        fake.write_text(FAKE)
        fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
        yield str(fake)


# The configs whose searches of the lm set the totals run over: each search is a made-up process,
# and the whole set three times over took most of this test's 113 s (300 s and more on a loaded
# machine). SetsTest checks each set's searches whole.
TOTALS_CONFIGS = 2


class TotalsTest(unittest.TestCase):
    def run_script(self, *args):
        """main() with `args` against the fake, over the lm set's searches of its first
        TOTALS_CONFIGS configs: the lines it printed (it exits 0)."""
        every = max_batch_evaluations.searches
        first = [str(p) for p in sorted((ROOT / "tests/data/hf").glob("*.json"))
                 if "t5" not in p.name][:TOTALS_CONFIGS]

        def few(which):
            return [(label, a) for label, a in every(which) if a[1] in first]

        out = io.StringIO()
        with fake_memest() as fake, \
                mock.patch.object(max_batch_evaluations, "searches", few), \
                mock.patch.object(sys, "argv", ["max_batch_evaluations.py", "--bin", fake, *args]), \
                contextlib.redirect_stdout(out):
            self.assertIn(max_batch_evaluations.main(), (None, 0))
        return out.getvalue().strip().splitlines()

    def test_counts_and_refusals(self):
        last = self.run_script("--set", "lm")[-1]
        n = 2 * TOTALS_CONFIGS  # the eager searches; the memory-efficient ones are refused
        self.assertEqual(last, f"lm: {n} searches, {3 * n} estimates (3.00 a search), {n} refused;"
                               f" {n} with an answer, 3.00 estimates each")

    def test_extra_arguments_reach_every_search(self):
        lines = self.run_script("--set", "lm", "--extra", "--safety-margin 5%", "--per-search")
        answered = [l for l in lines[:-1] if not l.endswith(" refused")]
        self.assertTrue(answered)
        self.assertTrue(all(l.endswith(" 7 4") for l in answered))
        self.assertIn("estimates (4.00 a search)", lines[-1])

    def test_the_replays_requests_follow_each_search_and_are_summed(self):
        lines = self.run_script("--set", "lm", "--backend", "symbolic", "--per-search")
        answered = [l for l in lines[:-2] if not l.endswith(" refused")]
        self.assertTrue(answered)
        self.assertTrue(all(l.endswith(" 7 1 2 3 40") for l in answered), answered)
        n = len(answered)
        self.assertEqual(lines[-1], f"replay: {2 * n} traces, {3 * n} replays, {40 * n} requests"
                                    " replayed")


# A few searches for --check (the whole of a set would take minutes of made-up processes): a batch,
# a dim, and a batch of micro-batches, whose successor is 4 batches on (11, which the fake never
# fits).
CHECKED = [("batch", ["--hf-config", "a.json", "--max-batch", "--dim", "seq=512"]),
           ("dim", ["--hf-config", "b.json", "--max-dim", "seq", "--batch", "4"]),
           ("micro", ["--hf-config", "c.json", "--micro-batches", "4", "--max-batch", "--dim",
                      "seq=512"])]


class CheckTest(unittest.TestCase):
    def run_script(self, *args):
        """main() with --check over CHECKED against the fake: its exit status and output."""
        out = io.StringIO()
        with fake_memest() as fake, \
                mock.patch.object(max_batch_evaluations, "searches", lambda which: CHECKED), \
                mock.patch.object(sys, "argv", ["max_batch_evaluations.py", "--bin", fake,
                                                "--set", "lm", "--check", *args]), \
                contextlib.redirect_stdout(out):
            status = max_batch_evaluations.main()
        return status, out.getvalue().strip().splitlines()

    def test_answers_that_fit_with_a_successor_that_does_not_pass(self):
        status, lines = self.run_script()
        self.assertEqual(status, 0, lines)
        self.assertEqual(lines[-1], f"checked {len(CHECKED)} answers: 0 not the answer")

    def test_an_answer_whose_successor_fits_fails(self):
        status, lines = self.run_script("--extra=--wrong")
        self.assertEqual(status, 1)
        self.assertIn("batch 7 is not the answer: its successor fits", lines)
        self.assertIn("dim 7 is not the answer: its successor fits", lines)
        self.assertNotIn("micro 7 is not the answer: its successor fits", lines)  # 11 does not
        self.assertEqual(lines[-1], f"checked {len(CHECKED)} answers: 2 not the answer")

    def test_an_answer_at_the_searchs_limit_has_no_successor_to_check(self):
        status, lines = self.run_script("--extra=--wrong --at-limit")
        self.assertEqual(status, 0, lines)
        self.assertEqual(lines[-1], f"checked {len(CHECKED)} answers: 0 not the answer")

    def test_an_answer_that_does_not_fit_or_cannot_be_estimated_fails(self):
        for extra, why in (("--short", "it does not fit"), ("--fail", "an estimate failed")):
            status, lines = self.run_script("--extra=" + extra)
            self.assertEqual(status, 1)
            self.assertIn("batch 7 is not the answer: " + why, lines)

    def test_the_successor_of_a_batch_of_micro_batches_is_whole_micro_batches_on(self):
        args = ["--hf-config", "x.json", "--micro-batches", "4", "--max-batch", "--dim", "seq=8"]
        self.assertEqual(max_batch_evaluations.successor_step(args), 4)
        self.assertEqual(max_batch_evaluations.successor_step(args + ["--micro-batches=2"]), 2)
        self.assertEqual(max_batch_evaluations.plain_query(args, 8)[-2:], ["--batch", "8"])
        dim = ["--hf-config", "x.json", "--max-dim", "seq", "--batch", "2"]
        self.assertEqual(max_batch_evaluations.successor_step(dim), 1)
        self.assertEqual(max_batch_evaluations.plain_query(dim, 9)[-2:], ["--dim", "seq=9"])


if __name__ == "__main__":
    unittest.main()
