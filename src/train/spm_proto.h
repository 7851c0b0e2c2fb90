// src/train/spm_proto.h — one edit of a serialized SentencePiece ModelProto (sentencepiece_model.proto,
// protobuf wire format) without the generated protobuf classes, which Debian's libsentencepiece-dev
// does not ship: the type of one piece.
#pragma once

#include <string>

namespace octet::train_detail {

/// SentencePiece's piece types (ModelProto.SentencePiece.Type).
enum class SpmPieceType { Normal = 1, Unknown = 2, Control = 3, UserDefined = 4, Unused = 5, Byte = 6 };

/// `model` (a serialized ModelProto) with every piece whose text is `piece` given type `type`; the
/// other fields and pieces are kept byte for byte. Throws octet::Error if `model` is not a valid
/// ModelProto encoding or holds no such piece.
std::string with_piece_type(const std::string& model, const std::string& piece, SpmPieceType type);

}  // namespace octet::train_detail
