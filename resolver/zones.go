package resolver

import (
	"net"
	"net/netip"
	"slices"

	"github.com/miekg/dns"
)

// zoneTable finds the zone of a querier address: Config.Zones compiled
// into one map per family keyed by masked prefix, probed from the longest
// configured prefix length down. It is read-only after newZoneTable.
type zoneTable struct {
	names   []string // distinct zones; a zone's index selects its answer variant
	regions []string // by zone index: the zone's region, "" unknown
	// hasRegions: some zone has a region.
	hasRegions bool
	v4, v6     zoneFamily
}

type zoneFamily struct {
	lens []int // distinct prefix lengths, longest first
	nets map[netip.Prefix]zoneNet
}

type zoneNet struct {
	zone int // index in names
	// nested: a longer configured prefix lies inside this one, so not
	// every address of this prefix is in this zone.
	nested bool
}

// newZoneTable compiles validated zones; nil when there are none.
func newZoneTable(zones []ZoneSubnet) *zoneTable {
	if len(zones) == 0 {
		return nil
	}
	t := &zoneTable{}
	index := map[string]int{}
	for _, z := range zones {
		zi, ok := index[z.Zone]
		if !ok {
			zi = len(t.names)
			index[z.Zone] = zi
			t.names = append(t.names, z.Zone)
			t.regions = append(t.regions, z.Region)
		}
		if z.Region != "" {
			t.regions[zi] = z.Region
			t.hasRegions = true
		}
		f := &t.v6
		if z.Prefix.Addr().Is4() {
			f = &t.v4
		}
		if f.nets == nil {
			f.nets = map[netip.Prefix]zoneNet{}
		}
		f.nets[z.Prefix] = zoneNet{zone: zi}
		if !slices.Contains(f.lens, z.Prefix.Bits()) {
			f.lens = append(f.lens, z.Prefix.Bits())
		}
	}
	for _, f := range []*zoneFamily{&t.v4, &t.v6} {
		slices.Sort(f.lens)
		slices.Reverse(f.lens)
		for p := range f.nets {
			for _, l := range f.lens {
				if l >= p.Bits() {
					continue
				}
				parent, _ := p.Addr().Prefix(l)
				if n, ok := f.nets[parent]; ok {
					n.nested = true
					f.nets[parent] = n
				}
			}
		}
	}
	return t
}

// lookup returns the zone of the longest configured prefix that holds
// addr and is no longer than maxBits (for a client subnet, the bits the
// querier revealed), with that prefix's length and whether it has longer
// prefixes inside it.
func (t *zoneTable) lookup(addr netip.Addr, maxBits int) (zone, bits int, nested, ok bool) {
	f := &t.v6
	if addr.Is4() {
		f = &t.v4
	}
	for _, l := range f.lens {
		if l > maxBits {
			continue
		}
		p, err := addr.Prefix(l)
		if err != nil {
			continue
		}
		if n, found := f.nets[p]; found {
			return n.zone, l, n.nested, true
		}
	}
	return 0, 0, false, false
}

// remoteAddr is the querier's address from the transport.
func remoteAddr(a net.Addr) netip.Addr {
	var ip net.IP
	switch a := a.(type) {
	case *net.UDPAddr:
		ip = a.IP
	case *net.TCPAddr:
		ip = a.IP
	default:
		return netip.Addr{}
	}
	addr, _ := netip.AddrFromSlice(ip)
	return addr.Unmap()
}

// clientSubnet is an EDNS Client Subnet option of a query (RFC 7871), kept
// to find the querier's zone and to be echoed with our scope.
type clientSubnet struct {
	present bool
	family  uint16
	source  uint8 // SOURCE PREFIX-LENGTH
	addr    netip.Addr
}

// readClientSubnet finds the ECS option of opt. valid is false when the
// option has address bits set past its source prefix length, which RFC
// 7871 (section 6) says to reject with FORMERR.
func readClientSubnet(opt *dns.OPT) (cs clientSubnet, valid bool) {
	for _, o := range opt.Option {
		e, ok := o.(*dns.EDNS0_SUBNET)
		if !ok {
			continue
		}
		cs = clientSubnet{present: true, family: e.Family, source: e.SourceNetmask}
		switch e.Family {
		case 1:
			cs.addr, _ = netip.AddrFromSlice(e.Address.To4())
		case 2:
			cs.addr, _ = netip.AddrFromSlice(e.Address)
		}
		if e.Family == 0 {
			return cs, true // SOURCE 0, no address: "do not use my subnet"
		}
		if p, err := cs.addr.Prefix(int(cs.source)); err != nil || p.Addr() != cs.addr {
			return cs, false
		}
		return cs, true
	}
	return clientSubnet{}, true
}

// optECSLen is the size of the ECS option we echo, 0 when none.
func (cs *clientSubnet) optECSLen() int {
	if !cs.present {
		return 0
	}
	return 4 + 4 + (int(cs.source)+7)/8
}

// zoneOf returns the querier's zone index, or -1, and the ECS scope an
// answer tailored to that zone must carry: the length of the matched
// subnet when every address in it is in the zone, else the client's
// source length (the answer holds for its subnet only); 0 without ECS.
func (s *Server) zoneOf(rp *reply) (zone int, scope uint8) {
	t := s.zones
	if cs := &rp.ecs; cs.present {
		scope = cs.source
		if cs.addr.IsValid() {
			if zi, bits, nested, ok := t.lookup(cs.addr, int(cs.source)); ok {
				if !nested {
					scope = uint8(bits)
				}
				rp.zoneByECS = true
				return zi, scope
			}
		}
	}
	if a := remoteAddr(rp.w.RemoteAddr()); a.IsValid() {
		if zi, _, _, ok := t.lookup(a, a.BitLen()); ok {
			return zi, scope
		}
	}
	return -1, scope
}
