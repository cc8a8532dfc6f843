// tools/eval/heldout.h -- which rows count as held out for which backend.
//
// Rule (docs/accuracy.md, "held-out / used"): a row is *used* for backend B when one of its
// `used_for` tags names B ("train:B" or "train:B-<suffix>", e.g. "train:learned-v1"), or when a
// tag names no backend (e.g. "calibrate:a100-40gb.cuda_context": a GPU profile every backend
// reads). Otherwise the row is *held out* for B. Used rows are only ever shown in the "used"
// tables.
//
// The learned backend's weights (learned/weights.json) record how they were trained: the input
// files, the holdout clauses that picked the test rows (e.g. "arch=gradual"), and the sha256 of the
// sorted ids of the training rows. MarkLearnedTrainingRows re-derives that training pool from the
// rows being evaluated and tags its rows "train:learned", so the in-memory GPUMemNet rows (which
// carry no used_for marks) are split correctly.
// Pure functions; thread-safe.
#ifndef MEMEST_TOOLS_EVAL_HELDOUT_H_
#define MEMEST_TOOLS_EVAL_HELDOUT_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "memest/status.h"
#include "tools/eval/rows.h"

namespace memest::eval {

inline constexpr char kLearnedTrainTag[] = "train:learned";

// True when `row` was used to train or calibrate something `backend` depends on (rule above).
bool UsedBy(const MeasuredRow& row, const std::string& backend);

// Attributes of a row for holdout clauses, as the trainer (tools/train_main.cc) names them:
// GPUMemNet rows: source=gpumemnet, family, name, arch, act, depth, step, index; other rows:
// source=<file name>, family, name.
using RowAttrs = std::map<std::string, std::string>;

// True when `attrs` satisfies clause "key=value" (string equality) or "key=lo-hi" (an integer
// attribute within [lo, hi]).
bool MatchesClause(const std::string& clause, const RowAttrs& attrs);

// The attributes of `row`; `gpumemnet` holds arch, act, depth, step and index per GPUMemNet row
// index (GpumemnetData::attrs).
RowAttrs AttrsOf(const MeasuredRow& row, const std::map<int, RowAttrs>& gpumemnet);

struct TrainingMarks {
  bool applied = false;   // the weights describe their training data, and rows were tagged
  int64_t marked = 0;     // rows tagged kLearnedTrainTag
  bool verified = false;  // the tagged rows' ids hash to the weights' train_row_ids_sha256
  std::string note;       // one sentence for the report
};

// Tags the rows of `rows` that the weights in `weights_json` were trained on. A row is a training
// candidate when the trainer would have used it (status ok with a device peak; GPUMemNet rows when
// the weights name GPUMemNet's CSVs as input, other CUDA rows when their file is a named input)
// and no holdout clause matches it; `attrs[i]` are the attributes of rows[i]. Without holdout
// clauses in the weights every candidate is tagged (conservative). Empty or unparsable JSON, or
// weights that do not describe their training data: nothing is tagged and `applied` is false.
TrainingMarks MarkLearnedTrainingRows(std::string_view weights_json,
                                      const std::vector<RowAttrs>& attrs,
                                      std::vector<MeasuredRow>* rows);

}  // namespace memest::eval

#endif  // MEMEST_TOOLS_EVAL_HELDOUT_H_
