// Status propagation macros. Debian's Abseil 20220623 ships no
// RETURN_IF_ERROR / ASSIGN_OR_RETURN, so hetps keeps these two.
#ifndef HETPS_LIB_BASE_STATUS_MACROS_H_
#define HETPS_LIB_BASE_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define HETPS_CONCAT_INNER_(a, b) a##b
#define HETPS_CONCAT_(a, b) HETPS_CONCAT_INNER_(a, b)

// Returns the status from the enclosing function if `expr` is not OK.
#define RETURN_IF_ERROR(expr)                      \
  do {                                             \
    ::absl::Status hetps_status_ = (expr);         \
    if (!hetps_status_.ok()) return hetps_status_; \
  } while (0)

// `lhs = value of expr`, or returns its status if not OK.
#define ASSIGN_OR_RETURN(lhs, expr) \
  ASSIGN_OR_RETURN_IMPL_(HETPS_CONCAT_(hetps_statusor_, __LINE__), lhs, expr)

#define ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                           \
  if (!tmp.ok()) return tmp.status();          \
  lhs = std::move(tmp).value()

#endif  // HETPS_LIB_BASE_STATUS_MACROS_H_
