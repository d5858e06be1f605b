// Small file-system helpers: whole-file and bounded reads, crash-safe writes, mkdir -p, and the
// lock that keeps two runs from writing one folder.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

namespace pb {

// Writes `bytes` to `path`, so readers (and a crash) see either the old file or the complete new
// one: a regular file (or a new one) is written to `path + ".tmp.<pid>"` and renamed over it; a
// symlink is followed, so the link stays and its target is replaced; any other existing file
// (/dev/null, a FIFO, /dev/full) is written through, never replaced. Throws pb::Error on failure.
void write_file_atomic(const std::string& path, const std::string& bytes);

// The most bytes a file of each kind may hold: a file larger than that (or an endless one,
// /dev/zero or a pipe that never ends) is refused naming the file, before it exhausts memory.
inline constexpr std::size_t kFileMiB = std::size_t{1} << 20;
inline constexpr std::size_t kConfigFileLimit = 1 * kFileMiB;      // --config: flag = value lines
inline constexpr std::size_t kPlanFileLimit = 64 * kFileMiB;       // plan JSON
inline constexpr std::size_t kResultsFileLimit = 256 * kFileMiB;   // Google Benchmark JSON, results.json
inline constexpr std::size_t kInputFileLimit = 256 * kFileMiB;     // any other input (profiles, machines, nets)

// Whole file as bytes, at most `limit` of them; throws pb::UsageError "cannot read <path>:
// <strerror>", or "<path>: larger than N MiB, the most a <kind> file may hold".
std::string read_file(const std::string& path, std::size_t limit = kInputFileLimit, const char* kind = "input");

// An open file read in bounded pieces, so an endless source (/dev/zero, a pipe) costs no more
// memory than the caller asked for. Errors are pb::UsageError naming the path.
class FileReader {
 public:
  explicit FileReader(const std::string& path);
  ~FileReader();
  FileReader(const FileReader&) = delete;
  FileReader& operator=(const FileReader&) = delete;
  // Appends up to `n` bytes to `out`; fewer only at the end of the file. Returns the count.
  std::size_t append(std::string& out, std::size_t n);
  bool regular() const { return regular_; }
  std::size_t size() const { return size_; }  // of a regular file; 0 otherwise
 private:
  std::string path_;
  int fd_ = -1;
  bool regular_ = false;
  std::size_t size_ = 0;
};

// mkdir -p; an empty `dir` is the current directory and a no-op. Throws pb::Error on failure.
void make_dirs(const std::string& dir);

// Creates `dir` (mkdir -p) and holds an exclusive lock on it (flock) for the object's life, so a
// second process writing the same folder is refused with pb::UsageError instead of mixing its
// files in. If the folder did not exist before and is still empty when the object dies, it is
// removed: a run that wrote nothing leaves nothing behind.
class DirLock {
 public:
  explicit DirLock(const std::string& dir);
  ~DirLock();
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
 private:
  std::string dir_;
  int fd_ = -1;
  bool created_ = false;
};

// Outputs assembled in a hidden folder inside `dir` (created now, so an unwritable `dir` fails
// before any work) and moved into `dir` by commit(); without commit() the staging folder is
// removed (and `dir` too, if this created it), so a failed command leaves things as they were.
class StagingDir {
 public:
  explicit StagingDir(const std::string& dir);
  ~StagingDir();
  StagingDir(const StagingDir&) = delete;
  StagingDir& operator=(const StagingDir&) = delete;
  const std::string& path() const { return staging_; }
  // Moves each named entry (a file or a folder) from path() into dir, replacing what is there,
  // in the order given.
  void commit(const std::vector<std::string>& names);
 private:
  std::string dir_, staging_;
  bool created_ = false;
};

}  // namespace pb
