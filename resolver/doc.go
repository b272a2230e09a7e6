// Package resolver will be spillway's authoritative DNS server (SRV, A/AAAA,
// TXT, SOA/NS) on miekg/dns, answering from registry snapshots. It is empty
// until the DNS issue lands; the server's --dns-addr flag is reserved for it.
package resolver
