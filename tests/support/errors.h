// The message of an expected exception, for tests that check what an error says. Header-only.
//
//   EXPECT_NE(testing::message_of<StoreError>([&] { store.merge({bad}); }).find(bad), npos);
#pragma once

#include <functional>
#include <string>

namespace amptune::testing {

// What the E that f() throws says; "<no exception>" when f() returns. Other exception types
// propagate (the test fails with them).
template <class E = std::exception>
std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "<no exception>";
}

}  // namespace amptune::testing
