//go:build linux

package sse

import (
	"errors"
	"fmt"
	"net"
	"sync"
	"syscall"
)

// hangups tells streams that their client closed its connection, for all
// of them from one goroutine blocked in epoll_wait, so that an idle stream
// needs no goroutine parked on its socket. Each connection is registered
// once (EPOLLONESHOT) for a hang-up; the event carries the descriptor and a
// generation, so that an event that was queued for a connection closed
// since is not taken for a later one on the same descriptor.
type hangups struct {
	epfd int
	wake [2]int // a pipe: closing its write end stops the loop
	done chan struct{}

	mu    sync.Mutex
	gen   int32
	slots []hangupSlot // by descriptor
}

type hangupSlot struct {
	gen   int32
	leave func()
}

// wakeGen marks the event of the wake pipe.
const wakeGen = -1

func newHangups() (*hangups, error) {
	epfd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("epoll: %w", err)
	}
	h := &hangups{epfd: epfd, done: make(chan struct{})}
	if err := syscall.Pipe2(h.wake[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		syscall.Close(epfd)
		return nil, fmt.Errorf("pipe: %w", err)
	}
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLHUP, Fd: int32(h.wake[0]), Pad: wakeGen}
	if err := syscall.EpollCtl(epfd, syscall.EPOLL_CTL_ADD, h.wake[0], &ev); err != nil {
		syscall.Close(epfd)
		syscall.Close(h.wake[0])
		syscall.Close(h.wake[1])
		return nil, fmt.Errorf("epoll: %w", err)
	}
	go h.loop()
	return h, nil
}

// close stops the loop and waits for it. No connection may be watched any
// more.
func (h *hangups) close() {
	syscall.Close(h.wake[1])
	<-h.done
}

func (h *hangups) loop() {
	defer close(h.done)
	defer syscall.Close(h.wake[0])
	defer syscall.Close(h.epfd)
	events := make([]syscall.EpollEvent, 256)
	for {
		n, err := syscall.EpollWait(h.epfd, events, -1)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return
		}
		for _, ev := range events[:n] {
			if ev.Pad == wakeGen {
				return
			}
			h.mu.Lock()
			var leave func()
			if fd := int(ev.Fd); fd < len(h.slots) && h.slots[fd].gen == ev.Pad {
				leave = h.slots[fd].leave
				h.slots[fd] = hangupSlot{}
			}
			h.mu.Unlock()
			if leave != nil {
				leave()
			}
		}
	}
}

// watch calls leave once the peer of conn hangs up (or the connection
// fails). stop must be called before conn is closed.
func (h *hangups) watch(conn net.Conn, leave func()) (stop func(), err error) {
	sc, ok := conn.(syscall.Conn)
	if !ok {
		return nil, errors.New("not a socket")
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return nil, err
	}
	fd := -1
	var gen int32
	var ctlErr error
	err = raw.Control(func(d uintptr) {
		fd = int(d)
		h.mu.Lock()
		defer h.mu.Unlock()
		h.gen = (h.gen + 1) & 0x7fffffff
		gen = h.gen
		for len(h.slots) <= fd {
			h.slots = append(h.slots, hangupSlot{})
		}
		h.slots[fd] = hangupSlot{gen: gen, leave: leave}
		ev := syscall.EpollEvent{Events: syscall.EPOLLRDHUP | syscall.EPOLLHUP | syscall.EPOLLERR | syscall.EPOLLONESHOT, Fd: int32(fd), Pad: gen}
		if ctlErr = syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); ctlErr != nil {
			h.slots[fd] = hangupSlot{}
		}
	})
	if err == nil {
		err = ctlErr
	}
	if err != nil {
		return nil, err
	}
	return func() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.slots[fd].gen == gen {
			h.slots[fd] = hangupSlot{}
		}
		_ = syscall.EpollCtl(h.epfd, syscall.EPOLL_CTL_DEL, fd, nil)
	}, nil
}
