// tools/jemalloc_conf.cc -- how the memest CLI's allocator (jemalloc, when the build links it:
// tools/CMakeLists.txt) is configured, read by jemalloc at its first allocation.
//
// Policy: jemalloc's own defaults, stated: no transparent huge pages forced on the heap or on its
// metadata ("thp:default,metadata_thp:disabled"; jemalloc's manual, opt.thp). Against the C
// library's allocator, on the code of 2026-11-29, jemalloc is about as fast for a fresh process
// (the 100,000-node chain 0.32-0.59 against 0.31-0.49 s, ResNet-50 6.6 against 6.2 ms) and about a
// tenth faster on the largest symbolic runs (the 1,000,000-node chain 8.4-10.0 against 10.2-11.1
// s); it was chosen on 2026-11-27 (e126f0c), with huge pages forced, when the loader made many more
// small allocations (the 100k chain then 207-433 ms against about 900 ms with glibc;
// docs/speed-log.md has both comparisons). Forcing huge pages ("thp:always", as the CLI did from
// e126f0c) was measured against this on 2026-11-29 on the 2-core build VM, the same binary in turn
// with MALLOC_CONF choosing the setting (wall time; medians of three sets of 2-10 runs each):
// without them the 1,000,000-node chain's analytical process takes about half the time (3.0-4.5 s
// against 5.9-7.2 s: the kernel's time fell from 3.7 to 1.0 s, no compaction stalls, just 2 MiB
// pages zeroed and faulted in on this virtual machine), its symbolic one about the same (9.8-12.1
// against 11.4 s, two runs), the 100,000-node chain's analytical process about a tenth longer
// (312-328 against 280-301 ms) and its symbolic one the same within the spread (0.66-0.89 against
// 0.49-0.93 s); ResNet-50 5.9 ms either way. With huge pages the spread was wider (the 100k chain,
// analytical, up to 840 ms). A host where huge pages are cheap can ask for them:
// MALLOC_CONF=thp:always,metadata_thp:always in the environment wins over this.
// The library (libmemest) does not choose an allocator: a program that embeds it keeps its own.
extern "C" {
// jemalloc reads this variable (its manual: "malloc_conf ... the application can define").
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables)
const char* malloc_conf = "thp:default,metadata_thp:disabled";
}
