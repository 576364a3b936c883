// error_of: the message of the frugal::Error a piece of code throws, for tests of error messages.
#pragma once
#include <gtest/gtest.h>

#include <functional>
#include <string>

#include "frugal/core/error.h"

namespace frugal::testing {

// The message of the Error `f` throws; fails the test when it throws none.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "no frugal::Error thrown";
  return "";
}

}  // namespace frugal::testing
