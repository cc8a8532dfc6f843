// tools/jemalloc_conf.cc -- how the memest CLI's allocator (jemalloc, when the build links it:
// tools/CMakeLists.txt) is configured, read by jemalloc at its first allocation.
//
// Policy: the CLI is a process that answers once and exits, so what it frees it keeps for its
// own next allocations ("dirty_decay_ms:-1": jemalloc never hands freed pages back to the
// kernel; its manual, opt.dirty_decay_ms), and otherwise jemalloc's defaults, stated: no
// transparent huge pages forced on the heap or on its metadata
// ("thp:default,metadata_thp:disabled"; opt.thp).
//  * Keeping freed pages: by default jemalloc purges them (madvise) as they age over 10 s, and
//    at once in the arena for allocations of 8 MiB and more (opt.oversize_threshold), whose decay
//    it sets to 0 whenever the default decay is positive (jemalloc's src/arena.c,
//    arena_choose_huge; its statistics show arena 8 at 0 here); the next allocation of that size
//    then faults every page in again, which on this virtual machine costs about 20 us a page
//    (docs/speed-log.md). A symbolic --max-batch on a large graph frees and allocates such
//    buffers at every trace and replay: the 100,000-node chain's (h100-80gb) purged 1.5 GB in
//    377,051 pages by jemalloc's statistics (opt.stats_print). Measured on 2026-12-05 on the
//    2-core build VM, the same binary in turn with MALLOC_CONF choosing the setting (wall time,
//    medians; /usr/bin/python3 subprocess runs alternating): that search 7.0 and 7.2 s against
//    4.7 and 5.6 s (two sets of six runs; 350k against 233k page faults, peak RSS 860 against
//    919 MB); the 1,000,000-node chain's 106.6 against 82.8 s (one run each; 3.86M against 2.21M
//    faults, 8.00 against 8.62 GB); the 10,000-node chain's 753 against 695 ms (nine runs each,
//    the same faults); single estimates the same within the spread (the 100k chain analytical
//    985 against 937 ms over 16 runs, symbolic 1,901 against 1,880 ms over 12, peak RSS 204 and
//    333 against 204 and 346 MB; the 1,000,000-node chain analytical 10.8 against 10.6 s, 1.90
//    against 1.91 GB, symbolic 19.4 against 20.5 s, one run each, 3.13 against 3.29 GB);
//    ResNet-50 --batch 64 19.5 against 19.3 ms (50 runs each), its symbolic --max-batch 39.8
//    against 39.7 ms. The cost is up to 8 % more peak RSS on the large symbolic runs. A longer
//    finite decay does not help (dirty_decay_ms:60000: 7.1 s; the oversize arena still purges at
//    once), nor does sending large allocations to the ordinary arenas (oversize_threshold:0:
//    6.5 s; they decay within the run).
//  * Against the C library's allocator, on the code of 2026-11-29, jemalloc (with its default
//    decay) is about as fast for a fresh process (the 100,000-node chain 0.32-0.59 against
//    0.31-0.49 s, ResNet-50 6.6 against 6.2 ms) and about a tenth faster on the largest symbolic
//    runs (the 1,000,000-node chain 8.4-10.0 against 10.2-11.1 s); it was chosen on 2026-11-27
//    (e126f0c), with huge pages forced, when the loader made many more small allocations (the
//    100k chain then 207-433 ms against about 900 ms with glibc; docs/speed-log.md has both
//    comparisons).
//  * Huge pages: forcing them ("thp:always", as the CLI did from e126f0c) was measured against
//    jemalloc's default on 2026-11-29, the same way (medians of three sets of 2-10 runs each):
//    without them the 1,000,000-node chain's analytical process takes about half the time
//    (3.0-4.5 s against 5.9-7.2 s: the kernel's time fell from 3.7 to 1.0 s, no compaction
//    stalls, just 2 MiB pages zeroed and faulted in on this virtual machine), its symbolic one
//    about the same (9.8-12.1 against 11.4 s, two runs), the 100,000-node chain's analytical
//    process about a tenth longer (312-328 against 280-301 ms) and its symbolic one the same
//    within the spread (0.66-0.89 against 0.49-0.93 s); ResNet-50 5.9 ms either way. With huge
//    pages the spread was wider (the 100k chain, analytical, up to 840 ms). A host where huge
//    pages are cheap can ask for them: MALLOC_CONF=thp:always,metadata_thp:always in the
//    environment wins over this, as MALLOC_CONF=dirty_decay_ms:10000 restores the default decay.
// The library (libmemest) does not choose an allocator: a program that embeds it keeps its own.
extern "C" {
// jemalloc reads this variable (its manual: "malloc_conf ... the application can define").
// NOLINTNEXTLINE(cppcoreguidelines-avoid-non-const-global-variables)
const char* malloc_conf = "dirty_decay_ms:-1,thp:default,metadata_thp:disabled";
}
