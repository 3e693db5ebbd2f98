// What the build knows about the source it was built from (cmake/build_info.cmake writes the
// definition at every build): `rz bench --json` records it with its figures.
#pragma once

namespace rz {

// The commit the binary was built from ("0123456789ab", with "-dirty" when tracked files had local
// changes), or "" when the source was not a git checkout.
const char* build_commit();

}  // namespace rz
