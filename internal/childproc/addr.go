package childproc

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
)

// Ports handed out by ReserveAddr lie below the kernel's ephemeral range.
// A port reserved by listening on :0 and closing comes from that range, and
// before the child binds it any outgoing connection on the machine may take
// it as its source port: a CI run failed so, a store's peer dialling out from
// the very port its sibling was about to listen on. Ports below the range are
// never chosen by the kernel; only another process's explicit bind can race.
const (
	reservedLow      = 20000
	defaultEphemeral = 32768 // Linux's default ip_local_port_range start
)

// nextPort walks the range from a random start, so that concurrent test
// binaries do not walk the same ports in step.
var nextPort atomic.Int64

// ReserveAddr is a loopback address nothing listens on now, for a child that
// must be named (in a sibling's --peers) before it starts.
func ReserveAddr() (string, error) {
	high := ephemeralStart()
	span := high - reservedLow
	if span <= 0 {
		return "", fmt.Errorf("the ephemeral port range starts at %d, below %d: no port range is left to reserve from", high, reservedLow)
	}
	nextPort.CompareAndSwap(0, int64(rand.IntN(span))+1)
	for range span {
		port := reservedLow + int(nextPort.Add(1))%span
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
		if err != nil {
			continue // taken: try the next
		}
		addr := l.Addr().String()
		if err := l.Close(); err != nil {
			return "", err
		}
		return addr, nil
	}
	return "", fmt.Errorf("no free loopback port in [%d, %d)", reservedLow, high)
}

// ephemeralStart is the first port the kernel may pick for :0 or a source port.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return defaultEphemeral
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return defaultEphemeral
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return defaultEphemeral
	}
	return n
}
