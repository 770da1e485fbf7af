//go:build linux

package partition_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// impairment delays and drops the packets one host sends to some others:
// what `tc qdisc add dev eth0 root netem delay D loss P%` with a filter on
// the destinations does. Kernels built without sch_netem (as this lab's
// machine is) cannot run that, so the lab does it in user space: a TUN
// device in the sending host's namespace, a route for each destination
// through it that only the host's own packets take (policy routing on
// iif lo), and this process reading each packet from the device, dropping
// it with probability loss, and writing it back after delay, when the
// namespace forwards it out of its eth0 as usual. Packets keep their order
// and the delay does not add up: each is late by delay from when it was
// sent. The other direction is untouched.
type impairment struct {
	tun     *os.File
	dev     string
	h       *host
	peers   []*host
	delay   time.Duration
	loss    float64
	queue   chan delayed
	wg      sync.WaitGroup
	dropped atomic.Int64
	passed  atomic.Int64
	once    sync.Once
}

type delayed struct {
	due time.Time
	pkt []byte
}

// impairLimit is how many packets may wait at once (netem's default
// limit); beyond it they are dropped.
const impairLimit = 1000

// impair starts delaying and dropping what h sends to peers; t's cleanup
// (or stop) ends it.
func (l *lab) impair(h *host, peers []*host, delay time.Duration, loss float64) *impairment {
	l.t.Helper()
	im := &impairment{h: h, peers: peers, delay: delay, loss: loss, queue: make(chan delayed, impairLimit),
		dev: fmt.Sprintf("sy%st%d", l.id, rand.IntN(1000))}
	fd, err := openTUN(im.dev)
	if err != nil {
		l.t.Fatalf("TUN device: %v", err)
	}
	im.tun = os.NewFile(uintptr(fd), "/dev/net/tun")
	l.t.Cleanup(im.stop)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmds := [][]string{
		{"ip", "link", "set", im.dev, "netns", h.ns},
		{"ip", "-n", h.ns, "link", "set", im.dev, "up"},
		{"ip", "netns", "exec", h.ns, "sysctl", "-q", "-w", "net.ipv4.ip_forward=1", "net.ipv4.conf.all.rp_filter=0",
			"net.ipv4.conf." + im.dev + ".rp_filter=0", "net.ipv4.conf." + im.dev + ".accept_local=1"},
		{"ip", "-n", h.ns, "rule", "add", "iif", "lo", "lookup", "100", "priority", "100"},
	}
	for _, p := range peers {
		cmds = append(cmds, []string{"ip", "-n", h.ns, "route", "add", p.addr + "/32", "dev", im.dev, "table", "100"})
	}
	for _, args := range cmds {
		if err := run(ctx, args...); err != nil {
			l.t.Fatal(err)
		}
	}
	im.wg.Add(2)
	go im.read()
	go im.write()
	return im
}

// openTUN creates a TUN device (no packet information header) and returns
// its file descriptor, non-blocking so that closing it ends a read.
func openTUN(name string) (int, error) {
	fd, err := syscall.Open("/dev/net/tun", syscall.O_RDWR|syscall.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	var req struct {
		name  [16]byte
		flags uint16
		_     [22]byte
	}
	copy(req.name[:], name)
	req.flags = syscall.IFF_TUN | syscall.IFF_NO_PI
	if _, _, errno := syscall.Syscall(syscall.SYS_IOCTL, uintptr(fd), syscall.TUNSETIFF, uintptr(unsafe.Pointer(&req))); errno != 0 {
		syscall.Close(fd)
		return -1, fmt.Errorf("TUNSETIFF %s: %w", name, errno)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return -1, err
	}
	return fd, nil
}

// read takes the packets the host sends through the device.
func (im *impairment) read() {
	defer im.wg.Done()
	defer close(im.queue)
	buf := make([]byte, 65536)
	for {
		n, err := im.tun.Read(buf)
		if err != nil {
			return // closed by stop
		}
		if rand.Float64() < im.loss {
			im.dropped.Add(1)
			continue
		}
		select {
		case im.queue <- delayed{due: time.Now().Add(im.delay), pkt: append([]byte(nil), buf[:n]...)}:
		default:
			im.dropped.Add(1) // over the limit
		}
	}
}

// write hands each packet back to the host's namespace when it is due,
// which forwards it to its destination.
func (im *impairment) write() {
	defer im.wg.Done()
	for d := range im.queue {
		time.Sleep(time.Until(d.due)) // the delay itself
		if _, err := im.tun.Write(d.pkt); err != nil {
			if errors.Is(err, os.ErrClosed) {
				continue // stopping: drain what is queued
			}
			im.dropped.Add(1)
			continue
		}
		im.passed.Add(1)
	}
}

// stop removes the routes (traffic goes straight again) and the device.
func (im *impairment) stop() {
	im.once.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		// Best effort: the namespace may be gone already (the lab's
		// cleanup), and with it the rule, the routes and the device.
		_ = run(ctx, "ip", "-n", im.h.ns, "rule", "del", "iif", "lo", "lookup", "100", "priority", "100")
		_ = run(ctx, "ip", "-n", im.h.ns, "route", "flush", "table", "100")
		im.tun.Close()
		im.wg.Wait()
	})
}
