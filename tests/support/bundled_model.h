// A test-suite base that loads the bundled tiny-shakespeare model (official numerics) and its tokenizer
// once per suite: model_ and tok_ for the tests of the suite.
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "model/model.h"
#include "support/test_paths.h"
#include "tokenizer/tokenizer.h"

namespace dsv4::test {

class BundledModelTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const std::string dir = bundled_model_dir();
    model_ = Model::load(dir, Numerics::Official).release();
    tok_ = new Tokenizer(Tokenizer::load(dir));
  }
  static void TearDownTestSuite() {
    delete model_;
    delete tok_;
    model_ = nullptr;
    tok_ = nullptr;
  }
  static inline Model* model_ = nullptr;
  static inline Tokenizer* tok_ = nullptr;
};

}  // namespace dsv4::test
