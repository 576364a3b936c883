// SIGINT and SIGTERM as a request to stop, taken by one thread of our own, never by a thread that
// runs kernels.
//
// Why: a signal handler runs on whichever thread the kernel picks, with the signal frame (about
// 3 KiB with the AVX-512 state) written just below that thread's stack pointer. The JIT "nocopy"
// sgemm kernels of oneDNN 2.x (Debian 12 ships 2.6.3; jit_avx512_common_gemm_f32 and
// jit_avx_gemm_f32), which dnnl_sgemm picks for many of frugal's shapes, point rsp at their heap
// workspace while they run whenever a block's K is large (above 84 with AVX-512). A handler
// interrupting one writes its frame over the heap below that workspace, and glibc aborts at a later
// free() ("corrupted size vs. prev_size while consolidating"): at the end of that GEMM, or at exit.
#pragma once

namespace frugal {

// While at least one StopSignals is alive, SIGINT and SIGTERM do not end the process but set
// stop_requested(). The first one opened blocks both signals in the calling thread and in every
// OpenMP worker (threads started later inherit the mask), clears the request, starts a thread that
// receives them with sigwait() and installs a handler that sets the request too: it replaces an
// inherited "ignore" (a shell starts background jobs with SIGINT ignored, and an ignored signal
// never reaches sigwait()) and serves the threads other code started earlier with the signals
// unblocked. When the last one closes, the receiving thread is joined and the handlers and the
// calling thread's mask are restored, so the signals act as before (one still pending acts at
// once); the OpenMP workers keep them blocked, which changes nothing as long as another thread
// takes them. Open and close on the thread that runs the OpenMP parallel regions, outside of any.
class StopSignals {
 public:
  StopSignals();
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;
};

// Whether SIGINT or SIGTERM arrived since the outermost StopSignals was opened.
bool stop_requested();

}  // namespace frugal
