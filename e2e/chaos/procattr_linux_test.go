package chaos

import "syscall"

// diesWithParent has the kernel kill a child process (SIGKILL) when the test binary that
// started it ends, whatever the way.
func diesWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
