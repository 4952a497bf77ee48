package e2e

import "syscall"

// diesWithParent has the kernel kill a bridge (SIGKILL) when the test binary that started
// it ends, whatever the way: a test binary cut by its -timeout runs no cleanups, and its
// bridges were left running.
func diesWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
