package loadtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The BullMQ release the reports install (npm), and the Redis client it needs, pinned so
// runs compare.
const (
	BullMQVersion  = "6.7.0"
	IORedisVersion = "6.0.0"
)

// InstallBullMQ installs BullMQ and ioredis once, in the user's cache, and returns the
// directory to run node in (node and npm must be on PATH).
func InstallBullMQ() (string, error) {
	if _, err := exec.LookPath("node"); err != nil {
		return "", fmt.Errorf("no node: %w", err)
	}
	npm, err := exec.LookPath("npm")
	if err != nil {
		return "", fmt.Errorf("no npm: %w", err)
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "sluice-bench", "bullmq-"+BullMQVersion+"-ioredis-"+IORedisVersion)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "ioredis")); err != nil {
		os.MkdirAll(dir, 0o755)
		os.WriteFile(filepath.Join(dir, "package.json"), []byte(`{"name":"sluice-bench-bullmq","private":true}`), 0o644)
		cmd := exec.Command(npm, "install", "--no-audit", "--no-fund", "bullmq@"+BullMQVersion, "ioredis@"+IORedisVersion)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("npm install bullmq@%s: %v: %s", BullMQVersion, err, out)
		}
	}
	return dir, nil
}

// ProcCPU is the CPU time process pid has used (utime + stime of /proc/<pid>/stat); 0 for
// pid 0 or a process that is gone.
func ProcCPU(pid int) time.Duration {
	if pid == 0 {
		return 0
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}
