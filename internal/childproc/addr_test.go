package childproc

import (
	"net"
	"strconv"
	"testing"
)

func TestReserveAddrIsFreeAndOutsideTheEphemeralRange(t *testing.T) {
	seen := map[string]bool{}
	for range 50 {
		addr, err := ReserveAddr()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s reserved twice", addr)
		}
		seen[addr] = true
		_, p, err := net.SplitHostPort(addr)
		if err != nil {
			t.Fatal(err)
		}
		port, _ := strconv.Atoi(p)
		if port < reservedLow || port >= ephemeralStart() {
			t.Fatalf("port %d is outside [%d, %d)", port, reservedLow, ephemeralStart())
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			t.Fatalf("reserved %s cannot be bound: %v", addr, err)
		}
		l.Close()
	}
}
