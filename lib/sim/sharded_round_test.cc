#include "lib/sim/sharded_round.h"

#include <catch2/catch.hpp>

namespace hetps {
namespace sim {
namespace {

// H hosts, a psd and a worker on each (the testbed's layout).
ShardedLayout Paired(int hosts) {
  ShardedLayout l;
  l.hosts = hosts;
  for (int h = 0; h < hosts; ++h) {
    l.server_host.push_back(h);
    l.worker_host.push_back(h);
  }
  return l;
}

TEST_CASE("two hosts: a segment pushed, then pulled back", "[sim]") {
  // One psd on host 0 holds one 100-byte segment; the worker on host 1
  // pushes it (100 B at 100 B/s: 1 s), then the psd sends it back (1 s).
  // Host 1's psd holds nothing.
  CHECK(ShardedRoundTime(Paired(2), {100, 100}, {100, 0}, 1000) == Approx(2.0));
  // In two segments the pull of the first overlaps the push of the
  // second: 0.5 s push, then push and pull share no link (host 1's uplink
  // and downlink), so 0.5 + 0.5 + 0.5.
  CHECK(ShardedRoundTime(Paired(2), {100, 100}, {100, 0}, 50) == Approx(1.5));
}

TEST_CASE("a psd's share on a slow host holds every worker's tail", "[sim]") {
  // The testbed's rates after the first change, in bytes/s, and the mlp's
  // 58 chunks of 16 KiB in 64 KiB segments. The 10 Mbit/s host sets the
  // round either way (its worker pushes and pulls the whole model), and
  // ADLB's Eq. 9 calls both maps within 1%; a few chunks on the 25 Mbit/s
  // host put that psd's last segment into every worker's tail.
  const std::vector<double> rate = {50e6 / 8, 25e6 / 8, 10e6 / 8, 100e6 / 8};
  auto round = [&](std::vector<double> chunks) {
    for (double& c : chunks) c *= 16384;
    return ShardedRoundTime(Paired(4), rate, chunks, 65536);
  };
  const double without = round({29, 0, 0, 29});
  const double with = round({26, 7, 0, 25});
  // The slow host's downlink alone: the model's 58 chunks from three psds.
  CHECK(without > 58 * 16384 / (10e6 / 8));
  CHECK(with > 1.04 * without);
}

TEST_CASE("a worker and a psd on one host need no flow", "[sim]") {
  ShardedLayout one;
  one.hosts = 1;
  one.server_host = {0};
  one.worker_host = {0};
  CHECK(ShardedRoundTime(one, {100}, {1000}, 100) == 0);
  // A second worker on another host: its push and pull only.
  ShardedLayout two = one;
  two.hosts = 2;
  two.worker_host = {0, 1};
  CHECK(ShardedRoundTime(two, {100, 100}, {100}, 100) == Approx(2.0));
}

TEST_CASE("sizes that disagree with the layout give no time", "[sim]") {
  CHECK(ShardedRoundTime(Paired(2), {100}, {100, 0}, 100) == 0);
  CHECK(ShardedRoundTime(Paired(2), {100, 100}, {100}, 100) == 0);
  CHECK(ShardedRoundTime(Paired(2), {100, 0}, {100, 0}, 100) == 0);
  CHECK(ShardedRoundTime(Paired(2), {100, 100}, {100, 0}, 0) == 0);
  ShardedLayout bad = Paired(2);
  bad.worker_host[1] = 2;
  CHECK(ShardedRoundTime(bad, {100, 100}, {100, 0}, 100) == 0);
}

}  // namespace
}  // namespace sim
}  // namespace hetps
