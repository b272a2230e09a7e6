// Package tlsconfig keeps a certificate, its key and a CA bundle fresh
// from disk and hands out *tls.Config values that always use the current
// files: rotation without a restart.
//
// # Usage
//
//	r, err := tlsconfig.New(tlsconfig.Config{
//		Files:  tlsconfig.Files{Cert: "server.crt", Key: "server.key", CA: "clients-ca.crt"},
//		Logger: logger,
//	})
//	go r.Run(ctx) // polls the files every Interval (default 2s)
//	srvCfg, err := r.ServerConfig(tlsconfig.ServerOptions{ClientAuth: tlsconfig.RequireClientCert, NextProtos: []string{"h2"}})
//	grpc.NewServer(grpc.Creds(credentials.NewTLS(srvCfg)))
//	dialCreds := r.TransportCredentials(tlsconfig.ClientOptions{}) // a client of another server
//
// # Reload
//
// Every Interval the Reloader reads the three files and compares the
// SHA-256 of their content with what it loaded last (reading a few KB
// every two seconds is cheaper than reasoning about mtime granularity and
// symlink swaps). When the content changed it parses the new material; a
// file that is missing, unparsable, or a key that does not match the
// certificate keeps the old material in use, logs "tls reload failed" and
// counts spillway_tls_reload_failures_total once per distinct bad
// content. A rotation that writes the certificate and then the key may
// count one failure in between; write both atomically (rename) to avoid
// it.
//
// A reload never touches an established connection: the server config
// uses GetConfigForClient, so only handshakes that start after the reload
// see the new certificate and client-CA pool. Likewise a client config's
// GetClientCertificate returns the certificate current at handshake time;
// TransportCredentials also re-reads the root pool for every new gRPC
// connection, while ClientConfig fixes the roots at the time it is called
// (an http.Client built from it trusts the CA bundle of that moment).
//
// # Concurrency
//
// All methods are safe for concurrent use. Run owns the polling; Check
// may be called concurrently with it (tests use it to reload at once).
package tlsconfig
