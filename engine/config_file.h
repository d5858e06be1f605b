// A --config file checked strictly before CLI11 reads it: read with a size limit, every line a
// comment, a [section] or one `name = value`, lists and strings closed, no key given twice.
#pragma once

#include <string>

namespace pb {

// Throws pb::UsageError "<source>:<line>: <what is wrong>" for the first bad line.
void check_config_text(const std::string& text, const std::string& source);
// read_file with the config limit, then check_config_text.
void check_config_file(const std::string& path);

}  // namespace pb
