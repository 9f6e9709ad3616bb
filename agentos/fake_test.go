package agentos

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/agentos-gateway/agentos-gateway/agentos/protocol"
)

// fakeSidecarEnv selects the misbehaviour of the fake sidecar. The fake is
// only for cases the real sidecar cannot be made to produce on demand.
const fakeSidecarEnv = "AGENTOS_FAKE_SIDECAR"

// fakeEngine is an Engine whose "sidecar" is this test binary in fake mode.
func fakeEngine(e Engine) Engine {
	e.SidecarBin = os.Args[0]
	return e
}

// runFakeSidecar speaks just enough of the protocol to complete a handshake,
// then misbehaves as mode says:
//   - "exit": dies before the handshake with a message on stderr;
//   - "hang": answers nothing after the handshake and sends no heartbeat;
//   - "slowhang": as "hang", but first loads for a second, sending nothing,
//     as a real sidecar may on a busy machine;
//   - "corrupt": answers the first request after the handshake with a frame
//     whose payload is not a valid ProtocolFrame;
//   - "oversize": announces a 1 GiB frame on the control lane.
func runFakeSidecar(mode string) int {
	if mode == "exit" {
		fmt.Fprintln(os.Stderr, "fake sidecar: refusing to start")
		return 3
	}
	if mode == "slowhang" {
		time.Sleep(time.Second)
		mode = "hang"
	}
	ctl := os.NewFile(3, "ctl")
	fr := protocol.NewFrameReader(os.Stdin, protocol.DefaultMaxFrameBytes)
	for n := 0; ; n++ {
		payload, err := fr.Next()
		if err != nil {
			return 0 // stdin EOF: the client closed us
		}
		f, err := protocol.UnmarshalFrame(payload)
		if err != nil {
			return 2
		}
		req, ok := f.(protocol.RequestFrame)
		if !ok {
			continue
		}
		var resp protocol.ResponsePayload
		switch req.Payload.(type) {
		case protocol.AuthenticateRequest:
			resp = protocol.AuthenticatedResponse{SidecarID: "fake", ConnectionID: "conn-1", MaxFrameBytes: 16 << 20}
		case protocol.OpenSessionRequest:
			resp = protocol.SessionOpenedResponse{SessionID: "session-1", OwnerConnectionID: "conn-1"}
		default:
			switch mode {
			case "hang":
				continue
			case "corrupt":
				writeRaw(os.Stdout, []byte{0x7f, 0x01, 0x02})
				continue
			case "oversize":
				var hdr [4]byte
				binary.BigEndian.PutUint32(hdr[:], 1<<30)
				ctl.Write(hdr[:])
				continue
			}
		}
		out, err := protocol.AppendFrame(nil, protocol.ResponseFrame{Schema: protocol.Schema, RequestID: req.RequestID, Ownership: req.Ownership, Payload: resp})
		if err != nil {
			return 2
		}
		ctl.Write(out)
	}
}

func writeRaw(w io.Writer, payload []byte) {
	var hdr [4]byte
	binary.BigEndian.PutUint32(hdr[:], uint32(len(payload)))
	w.Write(append(hdr[:], payload...))
}
