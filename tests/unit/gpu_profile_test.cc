#include "memest/gpu_profile.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "memest/stack.h"
#include "memest/status.h"

namespace memest::base {
// Internal parser behind GpuProfiles(), defined in base/gpu_profile.cc (no public header).
Result<std::vector<GpuProfile>> ParseGpuProfilesJson(std::string_view text);
}  // namespace memest::base

namespace memest {
namespace {

// docs/memory-model.md §2.3: default cuBLAS workspace sizes.
constexpr uint64_t kHopperWorkspace = 33'554'432;  // 4096 KiB x 8
constexpr uint64_t kOtherWorkspace = 8'519'680;    // :4096:2:16:8

const std::vector<std::string> kRequired = {"h100-80gb", "h200-141gb", "a100-40gb",
                                            "a100-80gb", "l4-24gb",    "rtx4090-24gb"};

struct NamedValue {
  const char* field;
  const ProfileValue* value;
};

std::vector<NamedValue> Values(const GpuProfile& p) {
  return {{"total_memory", &p.total_memory},
          {"usable_memory", &p.usable_memory},
          {"cublas_workspace", &p.cublas_workspace}};
}

TEST(GpuProfileTest, AllRequiredProfilesExist) {
  for (const std::string& name : kRequired) {
    Result<GpuProfile> p = FindGpuProfile(name);
    ASSERT_TRUE(p.ok()) << name << ": " << p.status().ToString();
    EXPECT_EQ(p->name, name);
    EXPECT_FALSE(p->display_name.empty()) << name;
  }
  EXPECT_GE(GpuProfiles().size(), kRequired.size());
}

TEST(GpuProfileTest, TableIsStableAndNamesAreUnique) {
  const std::vector<GpuProfile>& a = GpuProfiles();
  const std::vector<GpuProfile>& b = GpuProfiles();
  EXPECT_EQ(&a, &b);  // built once
  ASSERT_FALSE(a.empty());
  for (size_t i = 0; i < a.size(); ++i) {
    for (size_t j = i + 1; j < a.size(); ++j) EXPECT_NE(a[i].name, a[j].name);
  }
}

TEST(GpuProfileTest, EveryValueHasASourceAndPositiveBytes) {
  for (const GpuProfile& p : GpuProfiles()) {
    for (const NamedValue& nv : Values(p)) {
      EXPECT_FALSE(nv.value->source.empty()) << p.name << "." << nv.field;
      EXPECT_GT(nv.value->bytes, 0u) << p.name << "." << nv.field;
    }
    EXPECT_EQ(p.allocator, "native") << p.name;
  }
}

// Source vocabulary (docs/gpu-profiles.md): "measured: <repo-relative data file> ..." if and only
// if calibrated; otherwise "cited: ", "definition: " or "uncalibrated guess: ".
TEST(GpuProfileTest, SourcesFollowTheProvenanceRules) {
  for (const GpuProfile& p : GpuProfiles()) {
    for (const NamedValue& nv : Values(p)) {
      const std::string& s = nv.value->source;
      const std::string where = p.name + "." + nv.field + ": " + s;
      if (nv.value->calibrated) {
        ASSERT_TRUE(s.starts_with("measured: ")) << where;
        std::string rest = s.substr(std::string_view("measured: ").size());
        std::string path = rest.substr(0, rest.find(' '));
        EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(MEMEST_SOURCE_DIR) / path))
            << "calibrated value without its committed data file: " << where;
      } else {
        EXPECT_TRUE(s.starts_with("cited: ") || s.starts_with("definition: ") ||
                    s.starts_with("uncalibrated guess: "))
            << where;
      }
    }
  }
}

// Target stack torch 2.11: 32 MiB "for Hopper and Blackwell" (sm major 9, 10, 12); older torch used
// 32 MiB on sm 9.0 only. The two rules agree on every profile in the table today.
TEST(GpuProfileTest, CublasWorkspaceMatchesArchitecture) {
  for (const GpuProfile& p : GpuProfiles()) {
    const bool big = p.sm_major == 9 || p.sm_major == 10 || p.sm_major == 12;
    EXPECT_EQ(p.cublas_workspace.bytes, big ? kHopperWorkspace : kOtherWorkspace)
        << p.name << " sm " << p.sm_major << "." << p.sm_minor;
  }
  EXPECT_EQ(FindGpuProfile("h100-80gb")->cublas_workspace.bytes, kHopperWorkspace);
  EXPECT_EQ(FindGpuProfile("h200-141gb")->cublas_workspace.bytes, kHopperWorkspace);
  EXPECT_EQ(FindGpuProfile("a100-40gb")->cublas_workspace.bytes, kOtherWorkspace);
  EXPECT_EQ(FindGpuProfile("l4-24gb")->cublas_workspace.bytes, kOtherWorkspace);
}

TEST(GpuProfileTest, UsableNeverExceedsTotal) {
  for (const GpuProfile& p : GpuProfiles()) {
    EXPECT_LE(p.usable_memory.bytes, p.total_memory.bytes) << p.name;
    // The default stack's context and the workspaces must leave room for a job.
    EXPECT_LT(ResolveStack("")->cuda_context.bytes + 2 * p.cublas_workspace.bytes,
              p.usable_memory.bytes)
        << p.name;
  }
}

std::string ProfileForDevice(std::string_view device) {
  Result<GpuProfile> p = FindGpuProfileForDevice(device);
  return p.ok() ? p->name : "(" + std::string(ErrorCodeName(p.status().code())) + ")";
}

TEST(GpuProfileTest, DevicesFindTheirProfileByDisplayNameThenByFamily) {
  EXPECT_EQ(ProfileForDevice("NVIDIA A100-SXM4-40GB"), "a100-40gb");
  EXPECT_EQ(ProfileForDevice("nvidia h100 80gb hbm3"), "h100-80gb");
  EXPECT_EQ(ProfileForDevice("NVIDIA A100-SXM4-80GB"), "a100-80gb");
  // A display name of the table wins over the family guesses.
  EXPECT_EQ(ProfileForDevice("NVIDIA A100 80GB PCIe"), "a100-80gb-pcie");
  EXPECT_EQ(ProfileForDevice("NVIDIA A100-PCIE-40GB"), "a100-40gb-pcie");
  EXPECT_EQ(ProfileForDevice("NVIDIA H100 PCIe"), "h100-80gb-pcie");
  EXPECT_EQ(ProfileForDevice("NVIDIA A10G"), "a10g-24gb");
  EXPECT_EQ(ProfileForDevice("Tesla V100-PCIE-16GB"), "v100-16gb-pcie");
  EXPECT_EQ(ProfileForDevice("NVIDIA A100-SXM4-80GB-something"), "a100-80gb");
  EXPECT_EQ(ProfileForDevice("NVIDIA L4"), "l4-24gb");
  EXPECT_EQ(ProfileForDevice("NVIDIA GeForce RTX 4090"), "rtx4090-24gb");
  EXPECT_EQ(ProfileForDevice("NVIDIA L40S"), "l40s-48gb");
  EXPECT_EQ(ProfileForDevice("Tesla T4"), "t4-16gb");
  EXPECT_EQ(ProfileForDevice("NVIDIA A30"), "(not_found)");
  EXPECT_EQ(ProfileForDevice("Tesla P100-PCIE-16GB"), "(not_found)");
}

TEST(GpuProfileTest, AMigDeviceFindsItsSliceAndNeverItsWholeGpu) {
  // torch.cuda.get_device_name() on a slice: the GPU's name, "MIG" and the profile.
  EXPECT_EQ(ProfileForDevice("NVIDIA A100-SXM4-40GB MIG 1g.5gb"), "a100-40gb-mig-1g.5gb");
  EXPECT_EQ(ProfileForDevice("NVIDIA H100 80GB HBM3 MIG 3g.40gb"), "h100-80gb-mig-3g.40gb");
  // A slice the table lacks must not be answered with the whole GPU's capacity.
  EXPECT_EQ(ProfileForDevice("NVIDIA H200 MIG 1g.18gb"), "(not_found)");
  EXPECT_EQ(ProfileForDevice("NVIDIA A100-SXM4-80GB MIG 1g.10gb"), "(not_found)");
}

TEST(GpuProfileTest, MigSlicesNameAGpuOfTheTableAndShareItsComputeCapability) {
  int slices = 0;
  for (const GpuProfile& p : GpuProfiles()) {
    if (!p.is_mig()) continue;
    ++slices;
    Result<GpuProfile> parent = FindGpuProfile(p.mig_parent);
    ASSERT_TRUE(parent.ok()) << p.name << ": " << parent.status().ToString();
    EXPECT_FALSE(parent->is_mig()) << p.name;
    EXPECT_EQ(p.name, parent->name + "-mig-" + p.mig_profile);
    EXPECT_EQ(p.display_name, parent->display_name + " MIG " + p.mig_profile);
    EXPECT_EQ(p.sm_major, parent->sm_major) << p.name;
    EXPECT_EQ(p.sm_minor, parent->sm_minor) << p.name;
    EXPECT_EQ(p.cublas_workspace.bytes, parent->cublas_workspace.bytes) << p.name;
    // Less than the whole GPU, more than the fraction its name promises less one eighth.
    EXPECT_LT(p.total_memory.bytes, parent->total_memory.bytes * 101 / 100) << p.name;
    const uint64_t gb = std::stoull(p.mig_profile.substr(p.mig_profile.find('.') + 1));
    EXPECT_GT(p.total_memory.bytes, (gb << 30) * 7 / 8) << p.name;
    EXPECT_LE(p.total_memory.bytes, gb << 30) << p.name;
  }
  EXPECT_EQ(slices, 13);
}

TEST(GpuProfileTest, ParserReadsAMigSliceAndRejectsAHalfOne) {
  const std::string head =
      R"({"format": "memest-gpu-profiles/1", "profiles": [{"name": "x", "display_name": "X",
      "sm_major": 8, "sm_minor": 0, "sm_source": "cited: s", "allocator": "native",
      "total_memory": {"bytes": 100, "source": "cited: t", "calibrated": false},
      "usable_memory": {"bytes": 100, "source": "definition: u", "calibrated": false},
      "cublas_workspace": {"bytes": 1, "source": "cited: c", "calibrated": false})";
  Result<std::vector<GpuProfile>> ok =
      ParseGpuProfiles(head + R"(, "mig": {"parent": "a100-40gb", "profile": "1g.5gb"}}]})");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_TRUE(ok->front().is_mig());
  EXPECT_EQ(ok->front().mig_parent, "a100-40gb");
  Result<std::vector<GpuProfile>> half =
      ParseGpuProfiles(head + R"(, "mig": {"parent": "a100-40gb"}}]})");
  ASSERT_FALSE(half.ok());
  EXPECT_NE(half.status().message().find("mig"), std::string::npos) << half.status().ToString();
  Result<std::vector<GpuProfile>> typo =
      ParseGpuProfiles(head + R"(, "mig": {"parent": "a", "profile": "b", "gi": 3}}]})");
  EXPECT_FALSE(typo.ok());
}

TEST(GpuProfileTest, LookupIsCaseInsensitive) {
  Result<GpuProfile> p = FindGpuProfile("H100-80GB");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->name, "h100-80gb");
  EXPECT_TRUE(FindGpuProfile("Rtx4090-24Gb").ok());
}

// A lookup by name parses that profile alone (its own copy compiled in): it must be the table's.
TEST(GpuProfileTest, ALookupByNameGivesTheTablesProfileFieldAfterField) {
  auto same = [](const ProfileValue& a, const ProfileValue& b) {
    return a.bytes == b.bytes && a.source == b.source && a.calibrated == b.calibrated;
  };
  ASSERT_FALSE(GpuProfiles().empty());
  for (const GpuProfile& want : GpuProfiles()) {
    auto got = FindGpuProfile(want.name);
    ASSERT_TRUE(got.ok()) << want.name << ": " << got.status().ToString();
    EXPECT_EQ(got->name, want.name);
    EXPECT_EQ(got->display_name, want.display_name) << want.name;
    EXPECT_EQ(got->sm_major, want.sm_major) << want.name;
    EXPECT_EQ(got->sm_minor, want.sm_minor) << want.name;
    EXPECT_EQ(got->sm_source, want.sm_source) << want.name;
    EXPECT_TRUE(same(got->total_memory, want.total_memory)) << want.name;
    EXPECT_TRUE(same(got->usable_memory, want.usable_memory)) << want.name;
    EXPECT_TRUE(same(got->cublas_workspace, want.cublas_workspace)) << want.name;
    EXPECT_EQ(got->allocator, want.allocator) << want.name;
    EXPECT_EQ(got->mig_parent, want.mig_parent) << want.name;
    EXPECT_EQ(got->mig_profile, want.mig_profile) << want.name;
  }
}

TEST(GpuProfileTest, UnknownNameIsNotFoundAndListsKnownNames) {
  Result<GpuProfile> p = FindGpuProfile("a30-24gb");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), ErrorCode::kNotFound);
  EXPECT_NE(p.status().message().find("a30-24gb"), std::string::npos);
  for (const std::string& name : kRequired) {
    EXPECT_NE(p.status().message().find(name), std::string::npos) << p.status().message();
  }
  EXPECT_EQ(FindGpuProfile("").status().code(), ErrorCode::kNotFound);
}

// The parser behind the table never throws and reports malformed data as kInternal.
TEST(GpuProfileTest, MalformedDataIsAnInternalErrorNotAnException) {
  const char* bad[] = {
      "",
      "{",
      "[]",
      R"({"format": "memest-gpu-profiles/1", "profiles": []})",
      R"({"format": "other/9", "profiles": [{}]})",
      R"({"format": "memest-gpu-profiles/1", "profiles": [{"name": "x"}]})",
      R"({"format": "memest-gpu-profiles/1", "profiles": [1]})",
      R"({"format": "memest-gpu-profiles/1", "unknown": 1, "profiles": [{}]})",
  };
  for (const char* text : bad) {
    Result<std::vector<GpuProfile>> r = base::ParseGpuProfilesJson(text);
    EXPECT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), ErrorCode::kInternal) << text;
  }
}

std::string OneProfile(std::string_view total, std::string_view usable, std::string_view source,
                       std::string_view calibrated = "false") {
  auto value = [&](std::string_view bytes) {
    return std::string(R"({"bytes": )") + std::string(bytes) + R"(, "source": ")" +
           std::string(source) + R"(", "calibrated": )" + std::string(calibrated) + "}";
  };
  return std::string(R"({"format": "memest-gpu-profiles/1", "profiles": [{)") +
         R"("name": "test-gpu", "display_name": "Test", "sm_major": 8, "sm_minor": 0, )" +
         R"("sm_source": "cited: test", "allocator": "native", )" + R"("total_memory": )" +
         value(total) + R"(, "usable_memory": )" + value(usable) + R"(, "cublas_workspace": )" +
         value("1") + "}]}";
}

TEST(GpuProfileTest, ParserEnforcesTheDataRules) {
  Result<std::vector<GpuProfile>> good =
      base::ParseGpuProfilesJson(OneProfile("100", "90", "cited: x"));
  ASSERT_TRUE(good.ok()) << good.status().ToString();
  ASSERT_EQ(good->size(), 1u);
  EXPECT_EQ((*good)[0].usable_memory.bytes, 90u);
  EXPECT_EQ((*good)[0].total_memory.source, "cited: x");

  // usable > total, empty source, negative or fractional bytes, calibrated without "measured: ",
  // "measured: " without calibrated.
  for (const std::string& text :
       {OneProfile("100", "101", "cited: x"), OneProfile("100", "90", ""),
        OneProfile("-1", "90", "cited: x"), OneProfile("100.5", "90", "cited: x"),
        OneProfile("100", "90", "cited: x", "true"),
        OneProfile("100", "90", "measured: data/x.json", "false")}) {
    Result<std::vector<GpuProfile>> r = base::ParseGpuProfilesJson(text);
    EXPECT_FALSE(r.ok()) << text;
    EXPECT_EQ(r.status().code(), ErrorCode::kInternal) << text;
  }
}

}  // namespace
}  // namespace memest
