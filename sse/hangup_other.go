//go:build !linux

package sse

import (
	"errors"
	"net"
)

// hangups is Linux-only (epoll); elsewhere each stream has a goroutine
// parked on its socket instead.
type hangups struct{}

func newHangups() (*hangups, error) { return nil, errors.New("hang-up notification needs epoll") }

func (h *hangups) close() {}

func (h *hangups) watch(net.Conn, func()) (func(), error) {
	return nil, errors.New("hang-up notification needs epoll")
}
