package cli

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// isTerminal tells a terminal (a pseudo-terminal here) from other character devices.
func TestIsTerminal(t *testing.T) {
	ptmx, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminal: %v", err)
	}
	defer ptmx.Close()
	if err := unix.IoctlSetPointerInt(int(ptmx.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Skipf("unlockpt: %v", err)
	}
	n, err := unix.IoctlGetInt(int(ptmx.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Skipf("ptsname: %v", err)
	}
	pts, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Skipf("open the pseudo-terminal: %v", err)
	}
	defer pts.Close()
	if !isTerminal(pts.Fd()) {
		t.Error("a pseudo-terminal is not a terminal")
	}
	devNull, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer devNull.Close()
	if isTerminal(devNull.Fd()) {
		t.Error("/dev/null is a terminal")
	}
	if m := (&Main{Stdin: devNull}); m.terminal() {
		t.Error("Main.terminal: /dev/null is a terminal")
	}
	if m := (&Main{Stdin: pts}); !m.terminal() {
		t.Error("Main.terminal: a pseudo-terminal is not a terminal")
	}
}
