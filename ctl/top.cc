#include "ctl/top.h"

#include <sys/ioctl.h>
#include <termios.h>
#include <unistd.h>

#include "ctl/common.h"
#include "ctl/refresh.h"
#include "ctl/top_view.h"

namespace elastic::ctl {
namespace {

// The three requests of one refresh. Each has the local timeout, not the leader's: a view
// that froze 15 s waiting for an election would not take q.
TopSample read_sample(const std::string& socket, Answer* status_answer = nullptr) {
  TopSample sample;
  const auto read = [&](const char* verb, json& reply, std::string& error) {
    Answer answer = ask(socket, {{"verb", verb}}, kLocalTimeout);
    if (answer.code == 0) {
      reply = std::move(answer.reply);
    } else {
      error = answer.error;
    }
    return answer;
  };
  Answer status = read("status", sample.status, sample.status_error);
  read("nodes", sample.nodes, sample.nodes_error);
  read("jobs", sample.jobs, sample.jobs_error);
  sample.at_ms =
      std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count();
  if (status_answer != nullptr) *status_answer = std::move(status);
  return sample;
}

// Writes all of `text` to the terminal (a slow terminal takes it in pieces).
void write_out(const std::string& text) {
  std::size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(STDOUT_FILENO, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;  // the terminal is gone; the loop ends on its hangup
    written += static_cast<std::size_t>(n);
  }
}

// The terminal in the view's mode for as long as it lives: non-canonical (keys arrive one by
// one), no echo, no output processing (the frame writes \r\n), no flow control (Ctrl-S would
// freeze the view), signals on (Ctrl-C is SIGINT) but no suspend; the alternate screen with the
// cursor hidden. Restored on destruction, whichever way the view ends.
class ViewTerminal {
 public:
  ViewTerminal() {
    active_ = ::tcgetattr(STDIN_FILENO, &saved_) == 0;
    if (!active_) return;
    termios view = saved_;
    view.c_lflag &= static_cast<tcflag_t>(~(ICANON | ECHO | IEXTEN));
    view.c_iflag &= static_cast<tcflag_t>(~(IXON | ICRNL));
    view.c_oflag &= static_cast<tcflag_t>(~OPOST);
    view.c_cc[VMIN] = 1;
    view.c_cc[VTIME] = 0;
    view.c_cc[VSUSP] = _POSIX_VDISABLE;
    ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &view);
    write_out("\x1b[?1049h\x1b[?25l");
  }
  ~ViewTerminal() {
    if (!active_) return;
    write_out("\x1b[?25h\x1b[?1049l");
    ::tcsetattr(STDIN_FILENO, TCSAFLUSH, &saved_);
  }
  ViewTerminal(const ViewTerminal&) = delete;
  ViewTerminal& operator=(const ViewTerminal&) = delete;

 private:
  termios saved_{};
  bool active_ = false;
};

void draw(const TopView& view, const TopSample& sample, milliseconds interval) {
  winsize size{};
  if (::ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) != 0 || size.ws_col == 0 || size.ws_row == 0) {
    size.ws_col = 80;
    size.ws_row = 24;
  }
  const std::vector<std::string> lines = view.render(sample, interval, size.ws_col, size.ws_row);
  std::string frame = "\x1b[H";
  for (std::size_t i = 0; i < lines.size(); ++i) {
    frame += lines[i];
    frame += "\x1b[K";
    if (i + 1 < lines.size()) frame += "\r\n";
  }
  frame += "\x1b[J";
  write_out(frame);
}

int one_frame(const std::string& socket, milliseconds interval) {
  Answer status;
  const TopSample sample = read_sample(socket, &status);
  if (!status.answered()) {
    std::cerr << "elasticctl: " << status.error << "\n";
    return status.code;
  }
  for (const std::string& line : TopView().render(sample, interval, 0, 0)) {
    std::cout << line << "\n";
  }
  return 0;
}

int live(const std::string& socket, milliseconds interval) {
  Answer status;
  TopSample sample = read_sample(socket, &status);
  if (!status.answered()) {
    std::cerr << "elasticctl: " << status.error << "\n";
    return status.code;
  }
  StopSignals signals(/*resize=*/true);
  ViewTerminal terminal;
  TopView view;
  auto next_refresh = Clock::now() + interval;
  draw(view, sample, interval);
  while (true) {
    const auto left = std::chrono::duration_cast<milliseconds>(next_refresh - Clock::now());
    bool refresh = false;
    switch (signals.wait(std::max(left, milliseconds(0)), STDIN_FILENO)) {
      case StopSignals::Wake::kStop:
        return 0;
      case StopSignals::Wake::kResize:
        break;
      case StopSignals::Wake::kTimeout:
        refresh = true;
        break;
      case StopSignals::Wake::kInput: {
        char input[256];
        const ssize_t n = ::read(STDIN_FILENO, input, sizeof(input));
        if (n < 0 && (errno == EINTR || errno == EAGAIN)) break;
        if (n <= 0) return 0;  // the terminal hung up
        for (const std::string& key :
             split_keys(std::string_view(input, static_cast<std::size_t>(n)))) {
          const TopView::Action action = view.press(key);
          if (action == TopView::Action::kQuit) return 0;
          refresh = refresh || action == TopView::Action::kRefresh;
        }
        break;
      }
    }
    if (refresh) {
      sample = read_sample(socket);
      next_refresh = Clock::now() + interval;
    }
    draw(view, sample, interval);
  }
}

}  // namespace

void TopVerb::add(CLI::App& app) {
  top_ = app.add_subcommand("top", std::string("A live view of the nodes and jobs, refreshed "
                                               "every --interval. Keys: ") +
                                       kTopKeysHelp +
                                       "; Ctrl-C also quits (exit 0). When stdin or stdout "
                                       "is not a terminal it prints one frame and exits");
  add_interval_option(top_, interval_);
}

bool TopVerb::parsed() const { return top_->parsed(); }

int TopVerb::run(const std::string& socket) const {
  const milliseconds interval = *parse_interval(interval_);
  if (::isatty(STDIN_FILENO) != 1 || ::isatty(STDOUT_FILENO) != 1) {
    return one_frame(socket, interval);
  }
  return live(socket, interval);
}

}  // namespace elastic::ctl
