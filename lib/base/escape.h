// Text that came from outside (job names, node ids, error messages, spec
// values) made safe to print to a terminal or a log: control characters
// (C0, DEL, C1), Unicode bidirectional controls and other invisible format
// characters (U+061C, U+200B-U+200F, U+2028-U+202E, U+2060-U+2069,
// U+FEFF), and bytes that are not UTF-8 become visible escapes, so nothing
// from outside can move the cursor, recolour the terminal, reorder what is
// shown or hide text. Printable text, UTF-8 letters included, is kept.
// Pure; thread-safe.
#ifndef HETPS_LIB_BASE_ESCAPE_H_
#define HETPS_LIB_BASE_ESCAPE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace hetps {

// \n \r \t \\ for those four, \xNN for other bytes below 0x20, 0x7F and
// bytes that are not part of valid UTF-8, \uNNNN for the code points above.
std::string EscapeUntrusted(absl::string_view text);

// The pieces, for other escapers (JSON): the length of the valid UTF-8
// sequence at text[i] and its code point (0: not valid UTF-8 there), and
// whether a code point is a control or an invisible format character.
size_t DecodeUtf8(absl::string_view text, size_t i, uint32_t* code_point);
bool IsControlOrInvisible(uint32_t code_point);

// The offset of the first byte of `text` that is not valid UTF-8 or is a
// NUL (what a text file such as a job spec may not hold); npos if none.
size_t FirstNonText(absl::string_view text);

}  // namespace hetps

#endif  // HETPS_LIB_BASE_ESCAPE_H_
