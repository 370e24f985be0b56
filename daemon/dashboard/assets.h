// The dashboard's static files, compiled into the binary from daemon/dashboard/assets/ by
// embed_assets.cmake at build time (so the pages need no network and no files at run time).
// Thread safety: constants.
#pragma once

#include <string_view>

namespace elastic::dashboard::assets {

extern const std::string_view kPageHtml;  // assets/page.html: the shell of every page
extern const std::string_view kCss;       // assets/dashboard.css
extern const std::string_view kJs;        // assets/dashboard.js

}  // namespace elastic::dashboard::assets
