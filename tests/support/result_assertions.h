// gtest assertions for elastic::Result / Status: on failure they print the error's sentence.
#pragma once

#include <gtest/gtest.h>

#define ASSERT_OK(expr)                                     \
  do {                                                      \
    const auto& checked_ = (expr);                          \
    ASSERT_TRUE(checked_.ok()) << checked_.error().message; \
  } while (0)

#define EXPECT_OK(expr)                                     \
  do {                                                      \
    const auto& checked_ = (expr);                          \
    EXPECT_TRUE(checked_.ok()) << checked_.error().message; \
  } while (0)
