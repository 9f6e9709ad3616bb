package agentos

import (
	"sync"
	"unsafe"
)

// bufferPool keeps byte buffers of up to maxCap for reuse, so that the
// chunks of a large transfer (and the frames that carry them) reuse the
// same few megabytes instead of allocating each anew.
type bufferPool struct {
	maxCap int
	pool   sync.Pool
}

// get returns a buffer of length n (its contents are garbage).
func (p *bufferPool) get(n int) *[]byte {
	if v, ok := p.pool.Get().(*[]byte); ok {
		if cap(*v) >= n {
			*v = (*v)[:n]
			return v
		}
		p.pool.Put(v)
	}
	b := make([]byte, n)
	return &b
}

// put gives a buffer back; one above maxCap is left to the collector.
func (p *bufferPool) put(b *[]byte) {
	if cap(*b) <= p.maxCap {
		p.pool.Put(b)
	}
}

// transferBuffers hold file chunks, their base64 text and the frames that
// carry them: a frame holds one FileChunkSize chunk as base64 plus a few
// hundred bytes of header.
var transferBuffers = bufferPool{maxCap: FileChunkSize/3*4 + 8<<10}

// stringView is b as a string without a copy. The string is only valid
// while b is neither modified nor reused: it is for values that are encoded
// (copied into a frame) before the call that made them returns.
func stringView(b []byte) string {
	if len(b) == 0 {
		return ""
	}
	return unsafe.String(unsafe.SliceData(b), len(b))
}

// bytesView is s as bytes without a copy, for reading only.
func bytesView(s string) []byte {
	return unsafe.Slice(unsafe.StringData(s), len(s))
}
