// Tests of core/name_index.h: the loader's tensor name -> value id table.
#include "core/name_index.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace memest::core {
namespace {

// Names in the shapes real and generated graphs use: short and long, sharing long prefixes,
// differing only in their last bytes or in trailing zero bytes.
std::vector<std::string> ManyNames() {
  std::vector<std::string> names;
  for (int i = 0; i < 40000; ++i) {
    names.push_back("t" + std::to_string(i));
    names.push_back("/encoder/layer." + std::to_string(i) + "/attention/MatMul_output_0");
  }
  names.emplace_back("");
  names.emplace_back("x");
  names.emplace_back(std::string("x\0", 2));
  names.emplace_back(std::string("x\0\0\0\0\0\0\0", 8));
  names.emplace_back(std::string("x\0\0\0\0\0\0\0\0", 9));
  return names;
}

TEST(NameIndexTest, EveryInsertedNameIsFoundWithItsIdAndNoOtherNameIs) {
  const std::vector<std::string> names = ManyNames();
  NameIndex index;
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(index.Insert(names[i], static_cast<int>(i)),
              std::make_pair(static_cast<int>(i), true))
        << i;
  }
  EXPECT_EQ(index.size(), names.size());
  for (size_t i = 0; i < names.size(); ++i)
    EXPECT_EQ(index.Find(names[i]), static_cast<int>(i)) << i;
  EXPECT_EQ(index.Find("t40000"), -1);
  EXPECT_EQ(index.Find("/encoder/layer.0/attention/MatMul_output_1"), -1);
  EXPECT_EQ(index.Find(std::string("x\0\0", 3)), -1);
  EXPECT_NE(index.Find(std::string("x\0", 2)), index.Find("x"));
  EXPECT_NE(index.Find(std::string("x\0\0\0\0\0\0\0", 8)),
            index.Find(std::string("x\0\0\0\0\0\0\0\0", 9)));
}

TEST(NameIndexTest, InsertingAPresentNameKeepsTheFirstId) {
  NameIndex index;
  EXPECT_EQ(index.Insert("weight", 3), std::make_pair(3, true));
  EXPECT_EQ(index.Insert("weight", 7), std::make_pair(3, false));
  EXPECT_EQ(index.Find("weight"), 3);
  EXPECT_EQ(index.size(), 1u);
}

}  // namespace
}  // namespace memest::core
