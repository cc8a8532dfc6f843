// tools/jemalloc_conf.cc -- how the memest CLI's allocator (jemalloc, when the build links it:
// tools/CMakeLists.txt) is configured, read by jemalloc at its first allocation.
//
// Policy: jemalloc's own defaults, stated: no transparent huge pages forced on the heap or on its
// metadata ("thp:default,metadata_thp:disabled"; jemalloc's manual, opt.thp). jemalloc itself is
// what a fresh process gains from (a 100,000-node graph's process makes about 225 MB of small
// objects; against the C library's allocator the CLI on that graph went from about 900 ms to
// 220-330 ms with huge pages forced, docs/speed-log.md, and is at 290-330 ms without). Forcing
// huge pages ("thp:always", as the CLI did from e126f0c) was measured against this on 2026-11-29
// on the 2-core build VM, the same binary in turn with MALLOC_CONF choosing the setting (wall
// time; medians of three sets of 2-10 runs each): without them the 1,000,000-node chain's
// analytical process takes about half the time (3.0-4.5 s against 5.9-7.2 s: the kernel's time
// fell from 3.7 to 1.0 s, no compaction stalls, just 2 MiB pages zeroed and faulted in on this
// virtual machine), its symbolic one about the same (9.8-12.1 against 11.4 s), the 100,000-node
// chain's analytical process about a tenth longer (312-328 against 280-301 ms) and its symbolic
// one the same within the spread (0.66-0.89 against 0.49-0.93 s); ResNet-50 5.9 ms either way.
// With huge pages the spread was wider (the 100k chain, analytical, up to 840 ms). A host where
// huge pages are cheap can ask for them: MALLOC_CONF=thp:always,metadata_thp:always in the
// environment wins over this.
// The library (libmemest) does not choose an allocator: a program that embeds it keeps its own.
extern "C" {
// jemalloc reads this variable (its manual: "malloc_conf ... the application can define").
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables)
const char* malloc_conf = "thp:default,metadata_thp:disabled";
}
