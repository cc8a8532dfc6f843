// tools/jemalloc_conf.cc -- how the memest CLI's allocator (jemalloc, when the build links it:
// tools/CMakeLists.txt) is configured, read by jemalloc at its first allocation.
//
// Policy: transparent huge pages for the heap and jemalloc's own metadata ("thp:always",
// "metadata_thp:always"; jemalloc's TUNING.md and its manual, opt.thp). A CLI process touches
// every page it allocates once, and a page fault is the largest cost of loading a large graph in
// a fresh process (on the build VM each costs microseconds): a 100,000-node graph's process makes
// about 225 MB of small objects. With 2 MiB pages it faults 512 times less often. Where the
// kernel gives no huge pages (THP "never") jemalloc uses ordinary ones; nothing else changes.
// The library (libmemest) does not choose an allocator: a program that embeds it keeps its own.
extern "C" {
// jemalloc reads this variable (its manual: "malloc_conf ... the application can define").
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables)
const char* malloc_conf = "thp:always,metadata_thp:always";
}
