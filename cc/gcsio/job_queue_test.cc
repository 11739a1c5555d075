#include "cc/gcsio/job_queue.h"

#include <gtest/gtest.h>

#include <vector>

namespace gcsio {
namespace {

using Clock = std::chrono::steady_clock;

struct TestJob {
  int id;
  Clock::time_point not_before;
};

std::vector<int> Ids(const std::vector<TestJob>& jobs) {
  std::vector<int> ids;
  for (const TestJob& j : jobs) ids.push_back(j.id);
  return ids;
}

TEST(JobQueueTest, DueRetriesGoFirstInDueOrder) {
  const Clock::time_point t0 = Clock::now();
  JobQueue<TestJob> q;
  q.ready.push_back(TestJob{1, t0});
  q.Delay(TestJob{30, t0 + std::chrono::seconds(30)});
  q.Delay(TestJob{10, t0 + std::chrono::seconds(10)});
  q.Delay(TestJob{20, t0 + std::chrono::seconds(20)});
  ASSERT_TRUE(q.has_delayed());
  EXPECT_EQ(q.next_due(), t0 + std::chrono::seconds(10));

  q.PromoteDue(t0 + std::chrono::seconds(20));
  // 10 fell due first and went to the front; then 20 went in front of it.
  ASSERT_EQ(q.ready.size(), 3u);
  EXPECT_EQ(q.ready[0].id, 20);
  EXPECT_EQ(q.ready[1].id, 10);
  EXPECT_EQ(q.ready[2].id, 1);
  EXPECT_EQ(q.next_due(), t0 + std::chrono::seconds(30));
}

TEST(JobQueueTest, RemoveIfTakesMatchesFromBothAndKeepsTheHeap) {
  const Clock::time_point t0 = Clock::now();
  JobQueue<TestJob> q;
  q.ready.push_back(TestJob{2, t0});
  q.ready.push_back(TestJob{3, t0});
  q.Delay(TestJob{4, t0 + std::chrono::seconds(4)});
  q.Delay(TestJob{5, t0 + std::chrono::seconds(5)});
  q.Delay(TestJob{6, t0 + std::chrono::seconds(6)});

  const std::vector<TestJob> even = q.RemoveIf([](const TestJob& j) { return j.id % 2 == 0; });
  EXPECT_EQ(Ids(even), (std::vector<int>{2, 4, 6}));
  ASSERT_EQ(q.ready.size(), 1u);
  EXPECT_EQ(q.ready[0].id, 3);
  EXPECT_EQ(q.next_due(), t0 + std::chrono::seconds(5));
  EXPECT_TRUE(q.RemoveIf([](const TestJob& j) { return j.id == 99; }).empty());

  const std::vector<TestJob> rest = q.TakeAll();
  EXPECT_EQ(Ids(rest), (std::vector<int>{3, 5}));
  EXPECT_TRUE(q.ready.empty());
  EXPECT_FALSE(q.has_delayed());
}

}  // namespace
}  // namespace gcsio
