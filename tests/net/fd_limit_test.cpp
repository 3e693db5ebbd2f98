// The open-file budget of rz serve (net/fd_limit.hpp): the soft limit is raised to the hard one,
// and the socket cap leaves the open descriptors plus headroom. The binary under a low limit is
// tested in tests/net/serve_cli_test.cpp.
#include "net/fd_limit.hpp"

#include <sys/resource.h>

#include <gtest/gtest.h>

namespace rz::net {
namespace {

TEST(FdLimit, SocketCapLeavesOpenDescriptorsAndHeadroom) {
  EXPECT_EQ(socket_cap_for(1024, 20, 32), 972);
  EXPECT_EQ(socket_cap_for(128, 20, 32), 76);
  EXPECT_EQ(socket_cap_for(40, 20, 32), 0);  // never negative
}

TEST(FdLimit, RaisesTheSoftLimitToTheHardOne) {
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &before), 0);
  if (before.rlim_max == RLIM_INFINITY || before.rlim_max < 64) GTEST_SKIP() << "hard limit";
  rlimit low = before;
  low.rlim_cur = 64;
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &low), 0);
  const FdBudget b = raise_fd_limit(32);
  rlimit after{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &after), 0);
  EXPECT_EQ(b.soft_before, 64);
  EXPECT_EQ(b.soft, long(before.rlim_max));
  EXPECT_EQ(after.rlim_cur, before.rlim_max);
  EXPECT_GT(b.open_now, 2);  // stdin, stdout, stderr at least
  EXPECT_EQ(b.socket_cap, socket_cap_for(b.soft, b.open_now, 32));
  ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &before), 0);
}

}  // namespace
}  // namespace rz::net
