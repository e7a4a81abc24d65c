package drill

import "syscall"

// childAttr makes a child die with the drill, even when the drill is killed.
func childAttr() *syscall.SysProcAttr { return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL} }
