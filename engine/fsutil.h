// Small file-system helpers: whole-file reads, crash-safe writes, mkdir -p.
#pragma once

#include <string>

namespace pb {

// Writes `bytes` to `path + ".tmp.<pid>"`, then renames it over `path`, so readers (and a
// crash) see either the old file or the complete new one. Throws pb::Error on failure.
void write_file_atomic(const std::string& path, const std::string& bytes);

// Whole file as bytes; throws pb::UsageError "cannot read <path>: <strerror>".
std::string read_file(const std::string& path);

// mkdir -p; an empty `dir` is the current directory and a no-op. Throws pb::Error on failure.
void make_dirs(const std::string& dir);

}  // namespace pb
