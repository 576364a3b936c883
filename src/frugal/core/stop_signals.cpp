// SIGINT/SIGTERM received by a thread of our own; see stop_signals.h.
#include "frugal/core/stop_signals.h"

#include <pthread.h>

#include <atomic>
#include <csignal>
#include <mutex>
#include <thread>

namespace frugal {
namespace {

sigset_t stop_set() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  return set;
}

std::atomic<bool> g_requested{false};

extern "C" void note_stop(int) { g_requested.store(true); }

// What the outermost open StopSignals changed, to be undone when the last one closes.
struct Opened {
  int count = 0;
  sigset_t old_mask;
  struct sigaction old_int, old_term;
  std::atomic<bool> closing{false};
  std::thread receiver;
};
std::mutex g_mutex;
// Never destroyed: ~std::thread on a joinable thread calls std::terminate, so a process that
// calls exit() while a StopSignals is open must not run it.
Opened& g_opened = *new Opened;

void receive() {
  const sigset_t set = stop_set();
  for (;;) {
    int sig = 0;
    sigwait(&set, &sig);
    if (g_opened.closing.load()) return;  // the wake-up sent by the last close
    g_requested.store(true);
  }
}

}  // namespace

StopSignals::StopSignals() {
  std::lock_guard lock(g_mutex);
  if (g_opened.count > 0) {
    ++g_opened.count;
    return;
  }
  const sigset_t set = stop_set();
  pthread_sigmask(SIG_BLOCK, &set, &g_opened.old_mask);
#pragma omp parallel
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  g_requested.store(false);
  g_opened.closing.store(false);
  try {
    g_opened.receiver = std::thread(receive);  // inherits the blocked mask, as sigwait() needs
  } catch (...) {
    pthread_sigmask(SIG_SETMASK, &g_opened.old_mask, nullptr);
    throw;
  }
  struct sigaction handler{};
  handler.sa_handler = note_stop;
  sigemptyset(&handler.sa_mask);
  handler.sa_flags = SA_RESTART;
  sigaction(SIGINT, &handler, &g_opened.old_int);
  sigaction(SIGTERM, &handler, &g_opened.old_term);
  g_opened.count = 1;
}

StopSignals::~StopSignals() {
  std::lock_guard lock(g_mutex);
  if (--g_opened.count > 0) return;
  g_opened.closing.store(true);
  pthread_kill(g_opened.receiver.native_handle(), SIGTERM);  // to that thread only: wakes sigwait()
  g_opened.receiver.join();
  sigaction(SIGINT, &g_opened.old_int, nullptr);
  sigaction(SIGTERM, &g_opened.old_term, nullptr);
  pthread_sigmask(SIG_SETMASK, &g_opened.old_mask, nullptr);
}

bool stop_requested() { return g_requested.load(); }

}  // namespace frugal
