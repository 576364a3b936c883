// Errors: one exception type whose message says what went wrong and what to do about it.
#pragma once
#include <fmt/format.h>

#include <stdexcept>
#include <string>
#include <utility>

namespace frugal {

class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// An error every rank of a parallel run raises at the same point, having agreed to stop (a
// failed output on one rank, say): each rank reports it and the ranks end together, so no rank
// is killed before its line is out.
class CollectiveError : public Error {
 public:
  using Error::Error;
};

template <class... Args>
[[noreturn]] void fail(fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format(format, std::forward<Args>(args)...));
}

}  // namespace frugal

// FRUGAL_CHECK(cond, "fmt", args...): throw frugal::Error with the formatted message unless cond.
#define FRUGAL_CHECK(cond, ...)         \
  do {                                  \
    if (!(cond)) ::frugal::fail(__VA_ARGS__); \
  } while (0)
