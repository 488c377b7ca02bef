#include <gtest/gtest.h>
#include "zoo/zoo.hpp"
TEST(Smoke, Builds) { EXPECT_GT(joule::zoo::build("lenet5", {}).graph.num_nodes(), 0u); }
