// ProgressBar: the tqdm-style line, and that it never runs backwards or past its total.
#include "kvserve/core/progress.h"

#include <gtest/gtest.h>

namespace kvserve {
namespace {

TEST(ProgressBar, RendersLikeTqdm) {
  ProgressBar bar("Loading weights", 4, "layers");
  EXPECT_EQ(bar.render(2, 2.0),
            "Loading weights:  50% |###############               | 2/4 layers "
            "[00:02<00:02, 1.00 layers/s]");
  EXPECT_EQ(bar.render(4, 3725.0).substr(0, 24), "Loading weights: 100% |#");
  EXPECT_NE(bar.render(4, 3725.0).find("[1:02:05<00:00"), std::string::npos);
  // Nothing done yet: no rate, no estimate.
  EXPECT_NE(bar.render(0, 0.0).find("0/4 layers [00:00<00:00, 0.00 layers/s]"), std::string::npos);
}

TEST(ProgressBar, ZeroTotalIsOneStep) {
  ProgressBar bar("x", 0, "items");
  EXPECT_NE(bar.render(1, 1.0).find("100%"), std::string::npos);
}

TEST(ProgressBar, UpdatesAreClampedAndMonotonic) {
  testing::internal::CaptureStderr();
  {
    ProgressBar bar("Loading", 3, "layers");
    bar.update(2);
    bar.update(1);  // ignored: progress never goes back
    bar.update(7);  // clamped to the total; prints the final line once
    bar.update(3);
  }
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("3/3 layers"), std::string::npos) << err;
  EXPECT_EQ(err.find("7/3"), std::string::npos) << err;
  // The final line appears exactly once (stderr is not a terminal here: no redraws).
  EXPECT_EQ(err.find("100%"), err.rfind("100%")) << err;
}

}  // namespace
}  // namespace kvserve
