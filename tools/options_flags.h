// tools/options_flags.h -- the one table of command-line flags that set memest::Options.
//
// Policy: every flag that sets a field of memest::Options is written once, in the table of
// options_flags.cc: its spellings, its value's name, its help text, the documented option whose
// default --help shows (memest::DescribeOptions(), never a second copy of a default), whether it
// describes a training step only, and how its text is parsed and checked into Options. `memest`
// and `memest-measure` both build these flags from the table, so a flag they share has the same
// spellings, default, help and validation in both. A program offers the whole table or a subset
// (memest-measure offers only the options its harness executes: a flag it would ignore is not
// offered) and adds its own program-specific flags beside it. The many-GPU rows (Parallelism)
// are memest's only.
#ifndef MEMEST_TOOLS_OPTIONS_FLAGS_H_
#define MEMEST_TOOLS_OPTIONS_FLAGS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "memest/options.h"
#include "memest/status.h"

namespace memest::cli {

// Help texts with the defaults of memest::DescribeOptions() appended ("(default: adam)").
// Remembers which documented options a flag claimed, so that a program can list the others.
class HelpDefaults {
 public:
  explicit HelpDefaults(std::vector<OptionDoc> docs) : docs_(std::move(docs)) {}

  // `text` plus " (default: X)" for the first documented option `keys` name; `text` unchanged
  // when none does. A non-empty `shown` is X as the flag spells it (--outputs "held" for the
  // option's true), instead of the option's documented value.
  std::string With(std::string text, const std::vector<const char*>& keys,
                   const std::string& shown = "");
  std::string With(std::string text, std::initializer_list<const char*> keys) {
    return With(std::move(text), std::vector<const char*>(keys));
  }

  // "Other estimation options (no flag; library defaults):" and one line per documented option
  // no flag claimed, followed by an empty line; empty when every option has a flag.
  std::string Unclaimed() const;

 private:
  std::vector<OptionDoc> docs_;
  std::set<const OptionDoc*> used_;
};

// The --help section of the many-GPU rows (memest::Parallelism).
inline constexpr char kManyGpuGroup[] = "Many GPUs (training; the estimate is the worst rank's)";

// InvalidArgument: the many-GPU flags (memest's --per-rank among them) given with a world size of
// one.
Status ManyGpuFlagsNeedAWorld();

// How a flag takes its value on the command line.
enum class FlagValue {
  kText,      // one value, parsed by the table (an integer, a name, a regular expression)
  kTexts,     // repeatable: every occurrence's value, in order
  kNumber,    // one decimal number, parsed by CLI11
  kInteger,   // one signed integer, parsed by CLI11
  kUnsigned,  // one unsigned integer, parsed by CLI11
  kSwitch,    // no value: present or not
};

// When a row is applied. kParse rows only read their text; kResolve rows read files or the GPU
// table (--gpu-file, --capacity, --stack-file) and run after every kParse row and after the
// training-only check, so that a usage error is reported before a file is opened.
enum class FlagStage { kParse, kResolve };

class OptionFlags;

// One row of the table.
struct OptionFlag {
  const char* names;                  // CLI11 spelling: "-b,--batch"
  const char* type_name;              // the value's name in --help ("N"); empty for a switch
  const char* help;                   // what the flag does, without its default
  std::vector<const char*> doc_keys;  // DescribeOptions() names: "(default: ...)"
  FlagValue value;
  bool training_only;  // describes a training step: refused with --mode infer (CheckTrainingOnly)
  // The value before the command line: the text of the default Options' field (nullptr: none;
  // "true"/"false" for a switch, the decimal for a number).
  std::string (*initial)(const Options& defaults);
  // Parses the flag's value into `options`; reads other flags of `all` where two flags make one
  // option (--gpu-file with --gpu).
  Status (*apply)(const OptionFlags& all, Options* options);
  const char* group = nullptr;  // --help section; nullptr: the program's main one
  FlagStage stage = FlagStage::kParse;
};

// The whole table, in --help order.
const std::vector<OptionFlag>& OptionFlagTable();

// The table's flags that memest-measure offers: the options its harness executes.
const std::vector<std::string>& MeasureOptionFlagNames();

// The command line's values of the table's flags: registers them with a CLI11 app, then turns
// what was given into memest::Options.
class OptionFlags {
 public:
  // Offers the flags whose long names (without "--": "batch") are in `names`; every flag of the
  // table when `names` is empty.
  explicit OptionFlags(const std::vector<std::string>& names = {});
  OptionFlags(const OptionFlags&) = delete;
  OptionFlags& operator=(const OptionFlags&) = delete;

  // Adds the offered flags to `app`, in the table's order, with help from `help`.
  void AddTo(CLI::App& app, HelpDefaults& help);

  // Sets `options` from every offered flag, in the table's order (a flag not given leaves its
  // default): the kParse rows, then the training-only check when `refuse_training_in_inference`,
  // then the kResolve rows, then the checks across the many-GPU rows. InvalidArgument naming the
  // flag for a bad value.
  Status ApplyTo(Options* options, bool refuse_training_in_inference) const;

  // InvalidArgument naming the training-only flags given with `mode` infer.
  Status CheckTrainingOnly(Mode mode) const;

  // Whether the command line gave `long_name` ("batch").
  bool Given(std::string_view long_name) const;
  // The value of a kText flag: as given, else the default's text ("" for one without).
  const std::string& Text(std::string_view long_name) const;
  // Replaces the value of a kText flag, as if given (memest --phase prefill sets --mode infer).
  void SetText(std::string_view long_name, std::string text);
  const std::vector<std::string>& Texts(std::string_view long_name) const;
  double Number(std::string_view long_name) const;
  int64_t Integer(std::string_view long_name) const;
  uint64_t Unsigned(std::string_view long_name) const;
  bool Switch(std::string_view long_name) const;

  // The long names offered ("batch", "dim", ...), in the table's order.
  std::vector<std::string> Names() const;

  // The offered flags as JSON text (memest --list-flags, memest-measure --list-flags), in the
  // table's order: one object per flag with its spellings ("names"), the value's name ("value",
  // null for a switch) and kind, its default (the default Options' text, null when it has
  // none), its --help text (with the documented default appended, as --help shows it), whether
  // it describes a training step only, and its --help section (null: the main one). Written
  // from the same rows as --help and as parsing, so a tool reading it cannot disagree with them.
  std::string DescribeJson(HelpDefaults& help) const;

 private:
  struct Slot {
    const OptionFlag* flag = nullptr;
    std::string long_name;
    std::string text;
    std::vector<std::string> texts;
    double number = 0;
    int64_t integer = 0;
    uint64_t unsigned_value = 0;
    bool on = false;
    CLI::Option* option = nullptr;
  };
  const Slot& Find(std::string_view long_name) const;
  Slot& Find(std::string_view long_name);
  bool Offers(std::string_view long_name) const;

  std::vector<std::unique_ptr<Slot>> slots_;
};

// Parses a decimal integer in [min, 2^63-1]. `what` names the flag in the error, which always
// states the accepted range: the value is never clamped.
Result<int64_t> ParseInteger(std::string_view what, const std::string& text, int64_t min);

// Bytes with an optional unit: "1000000", "512MiB", "23.5GiB" (KiB, MiB, GiB, B). nullopt when
// the text is not that, or is 10^18 bytes or more.
std::optional<uint64_t> ParseByteSize(const std::string& text);

}  // namespace memest::cli

#endif  // MEMEST_TOOLS_OPTIONS_FLAGS_H_
