"""scripts/bench_instructions.py: the inclusive counts it reads from callgrind_annotate's output
and the answer it reads from a search's JSON (made up here, in the tools' formats)."""
import json
import pathlib
import sys
import unittest

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_instructions  # noqa: E402

# callgrind_annotate --inclusive=yes lists a function under its source path and again under its
# path with the binary; the count is the same or, for inlined parts, a little less.
ANNOTATED = """\
--------------------------------------------------------------------------------
Ir                    file:function
--------------------------------------------------------------------------------
305,798,182 (100.0%)  PROGRAM TOTALS
211,830,474 (69.27%)  /work/main/memory/context.cc:memest::Estimator::Run(memest::Model const&, memest::Options const&) const
211,830,467 (69.27%)  memory/context.cc:memest::Estimator::Run(memest::Model const&, memest::Options const&) const [/tmp/memest]
 81,671,176 (26.71%)  /work/main/ops/load_model.cc:memest::LoadModel(std::string const&)
 31,901,249 (10.43%)  core/loader.cc:memest::core::(anonymous namespace)::Loader::Parse(std::basic_string_view<char>) [/tmp/memest]
 28,676,721 ( 9.38%)  ???:google::protobuf::MessageLite::ParseFromString(std::string const&) [/usr/lib/libprotobuf.so.32]
  5,000,000 ( 1.63%)  memory/context.cc:memest::Estimator::RunOnStages(memest::Model const&) [/tmp/memest]
  4,000,000 ( 1.31%)  ops/load_model.cc:memest::LoadModelFromBytes(std::string_view) [/tmp/memest]
"""


class InclusiveCountsTest(unittest.TestCase):
    def test_each_function_takes_its_largest_listing(self):
        c = bench_instructions.inclusive_counts(ANNOTATED)
        self.assertEqual(c["estimate"], 211_830_474)
        self.assertEqual(c["load"], 81_671_176)
        self.assertEqual(c["parse"], 31_901_249)
        self.assertEqual(c["heap_parse"], 28_676_721)  # a library's function: no source file

    def test_a_longer_name_is_not_the_function(self):
        # RunOnStages and LoadModelFromBytes start like Run and LoadModel but are other functions.
        only_others = "\n".join(l for l in ANNOTATED.splitlines()
                                if "RunOnStages" in l or "FromBytes" in l)
        self.assertEqual(bench_instructions.inclusive_counts(only_others), {})

    def test_a_function_not_run_has_no_count(self):
        self.assertNotIn("max_batch", bench_instructions.inclusive_counts(ANNOTATED))


class AnswerTest(unittest.TestCase):
    def test_the_answer_of_a_search(self):
        out = json.dumps({"results": [{"max_batch": {"dim": "batch", "batch": 966}}]})
        self.assertEqual(bench_instructions.answer_of(out), 966)
        out = json.dumps({"results": [{"max_batch": {"dim": "seq", "batch": 2214}}]})
        self.assertEqual(bench_instructions.answer_of(out), 2214)


if __name__ == "__main__":
    unittest.main()
