// Writes the seed corpus of the HTTP fuzzer (http_fuzz.cc): the requests a browser, curl and
// Prometheus send to the dashboard and the metrics endpoint, a few refused ones, tokens and
// query strings, each prefixed with the selector byte http_fuzz.cc reads first.
// Usage: http_fuzz_corpus <dir>
#include "tests/fuzz/seed_writer.h"

int main(int argc, char** argv) {
  elastic::fuzz::SeedWriter seeds;
  if (!seeds.open(argc, argv)) return 64;
  const auto write = [&](char selector, const char* body) { seeds.write(selector, body); };
  const char* heads[] = {
      "GET / HTTP/1.1\r\nHost: 127.0.0.1:8474\r\nUser-Agent: Mozilla/5.0\r\nAccept: "
      "text/html\r\nAccept-Encoding: gzip, deflate\r\nConnection: keep-alive\r\n\r\n",
      "GET /api/job?id=fmnist-3 HTTP/1.1\r\nHost: h\r\nAuthorization: Bearer s3cret-token\r\n\r\n",
      "GET /api/events?job=a%2Db&limit=100 HTTP/1.1\r\nHost: h\r\n\r\n",
      "HEAD /metrics HTTP/1.0\r\n\r\n",
      "GET /metrics HTTP/1.1\nHost: h\nAccept: application/openmetrics-text\n\n",
      "POST /api/jobs HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}",
      "GET /job?id=x HTTP/1.1\r\nA: b\r\n c\r\n\r\n",
      "GET /jobs HTTP/1.1\r\nAuthorization: Bearer a\r\nAuthorization: Bearer b\r\n\r\n",
  };
  for (const char* head : heads) write(0, head);
  write(2, "Bearer s3cret-token");
  write(2, "bearer  s3cret-tokem ");
  write(3, "job=j-1&limit=20");
  write(3, "id=%41%zz+x");
  return 0;
}
