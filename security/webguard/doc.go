// Package webguard keeps web pages out of spillway's HTTP API: a browser
// may reach the port (on loopback, or on the office network), so a page
// from anywhere could otherwise make it register endpoints (cross-site
// request forgery) or, through a name of its own that resolves to the
// server (DNS rebinding), read and change it as if it were the server's
// own page. Handler wraps the whole HTTP mux. The checks apply to
// requests from browsers, which carry Origin or Sec-Fetch-Site; a tool
// (spillwayctl, curl, agents, Prometheus) sends neither, cannot be steered
// by a page, and is served as by earlier releases (any Host, any
// Content-Type; a write with a type a page could send is counted in
// spillway_http_untyped_tool_writes_total). In order:
//
//   - Host (every browser request): an IP literal, localhost or a name under
//     .localhost, the machine's host name, or one of Config.Hosts; with
//     no Hosts on a TLS listener, any name (the certificate is the check:
//     a rebinding page fails the handshake). Else 421, field "Host".
//   - Origin (every method but GET, HEAD and OPTIONS): a browser's
//     cross-origin write is refused, by Sec-Fetch-Site (anything but
//     same-origin or none) or, without it, an Origin whose host is not
//     the Host (http.CrossOriginProtection). 403, field "Origin" (or
//     "Sec-Fetch-Site" when only that was sent). Clients that are not
//     browsers (spillwayctl, curl, clientlib) send neither header.
//   - Content-Type (the same methods, from browsers): application/json or
//     application/yaml, parameters allowed; absent only with an empty
//     body. The types a page may send cross-site without a CORS preflight
//     (text/plain, application/x-www-form-urlencoded, multipart/form-data,
//     or none) are refused, so a write needs a preflight, which spillway
//     never grants. 415, field "Content-Type".
//
// Every answer, refused or not, carries X-Content-Type-Options: nosniff,
// so a browser never runs a JSON answer as a script or a page. Refusals
// are httpjson Error bodies and are counted in
// spillway_http_refused_total{check}.
//
// # Usage
//
//	h := webguard.Handler(webguard.Config{Hosts: cfg.HTTPHosts, TLS: tlsOn, Registerer: reg}, mux)
//
// Config.Hosts are checked when the configuration is read, with
// CheckHost; a name that does not pass never matches a request.
//
// # Concurrency
//
// The handler Handler returns is safe for concurrent use; its Config is
// read once, when it is built.
package webguard
