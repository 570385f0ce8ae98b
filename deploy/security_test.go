package deploy_test

import (
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The images and manifests run sluice unprivileged (issue #21): the runtime stages of the
// Dockerfile are distroless or scratch with a numeric non-root USER; every sluice pod and
// container in k8s/ runs as non-root with a read-only root filesystem, no capabilities, no
// privilege escalation and the RuntimeDefault seccomp profile; the compose services the
// same.

func TestDockerfileRuntimeIsUnprivileged(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	stages := regexp.MustCompile(`(?mi)^FROM\s+(?:--\S+\s+)*(\S+)(?:\s+AS\s+(\S+))?`).FindAllStringSubmatchIndex(string(data), -1)
	s := string(data)
	runtime := 0
	for i, m := range stages {
		base, name := s[m[2]:m[3]], ""
		if m[4] >= 0 {
			name = s[m[4]:m[5]]
		}
		end := len(s)
		if i+1 < len(stages) {
			end = stages[i+1][0]
		}
		body := s[m[1]:end]
		if name != "ingress" && name != "drainer" {
			continue
		}
		runtime++
		if !strings.HasPrefix(base, "gcr.io/distroless/") && base != "scratch" {
			t.Errorf("stage %s runs on %s, want distroless or scratch", name, base)
		}
		users := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindAllStringSubmatch(body, -1)
		if len(users) == 0 {
			t.Errorf("stage %s has no USER", name)
			continue
		}
		last := users[len(users)-1][1]
		uid, _, _ := strings.Cut(last, ":")
		if n, err := strconv.Atoi(uid); err != nil || n == 0 {
			t.Errorf("stage %s: USER %s, want a numeric non-root uid (k8s runAsNonRoot checks numbers)", name, last)
		}
		if regexp.MustCompile(`(?m)^(RUN|VOLUME)\b`).MatchString(body) {
			t.Errorf("stage %s runs commands or declares volumes: the runtime image is copied files only", name)
		}
	}
	if runtime != 2 {
		t.Fatalf("found %d runtime stages (ingress, drainer), want 2", runtime)
	}
}

type secContext struct {
	RunAsNonRoot             *bool  `yaml:"runAsNonRoot"`
	RunAsUser                *int64 `yaml:"runAsUser"`
	ReadOnlyRootFilesystem   *bool  `yaml:"readOnlyRootFilesystem"`
	AllowPrivilegeEscalation *bool  `yaml:"allowPrivilegeEscalation"`
	Privileged               *bool  `yaml:"privileged"`
	Capabilities             struct {
		Drop []string `yaml:"drop"`
		Add  []string `yaml:"add"`
	} `yaml:"capabilities"`
	SeccompProfile struct {
		Type string `yaml:"type"`
	} `yaml:"seccompProfile"`
}

func TestK8sSecurityContext(t *testing.T) {
	t.Parallel()
	checked := 0
	for _, f := range []string{"k8s/ingress.yaml", "k8s/drainer.yaml"} {
		for _, doc := range documents(t, f) {
			var d struct {
				Kind string `yaml:"kind"`
				Spec struct {
					Template struct {
						Spec struct {
							HostNetwork     bool       `yaml:"hostNetwork"`
							HostPID         bool       `yaml:"hostPID"`
							SecurityContext secContext `yaml:"securityContext"`
							Containers      []struct {
								Name            string     `yaml:"name"`
								SecurityContext secContext `yaml:"securityContext"`
							} `yaml:"containers"`
						} `yaml:"spec"`
					} `yaml:"template"`
				} `yaml:"spec"`
			}
			if err := doc.Decode(&d); err != nil {
				t.Fatal(err)
			}
			if d.Kind != "Deployment" {
				continue
			}
			pod := d.Spec.Template.Spec
			if pod.HostNetwork || pod.HostPID {
				t.Errorf("%s: host network or PID namespace", f)
			}
			psc := pod.SecurityContext
			if psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
				t.Errorf("%s: pod securityContext %+v, want runAsNonRoot and a non-zero runAsUser", f, psc)
			}
			if psc.SeccompProfile.Type != "RuntimeDefault" {
				t.Errorf("%s: seccompProfile %q, want RuntimeDefault", f, psc.SeccompProfile.Type)
			}
			for _, c := range pod.Containers {
				checked++
				sc := c.SecurityContext
				if sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem {
					t.Errorf("%s/%s: readOnlyRootFilesystem not true", f, c.Name)
				}
				if sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
					t.Errorf("%s/%s: allowPrivilegeEscalation not false", f, c.Name)
				}
				if sc.Privileged != nil && *sc.Privileged {
					t.Errorf("%s/%s: privileged", f, c.Name)
				}
				if !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0 {
					t.Errorf("%s/%s: capabilities %+v, want drop ALL and none added", f, c.Name, sc.Capabilities)
				}
				if sc.RunAsUser != nil && *sc.RunAsUser == 0 {
					t.Errorf("%s/%s: runAsUser 0", f, c.Name)
				}
			}
		}
	}
	if checked != 2 {
		t.Fatalf("checked %d containers, want the ingress and the drainer", checked)
	}
}

func TestComposeSluiceServicesHardened(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Build       any      `yaml:"build"`
			User        string   `yaml:"user"`
			ReadOnly    bool     `yaml:"read_only"`
			CapDrop     []string `yaml:"cap_drop"`
			SecurityOpt []string `yaml:"security_opt"`
			Privileged  bool     `yaml:"privileged"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatal(err)
	}
	n := 0
	for name, s := range c.Services {
		if !strings.HasPrefix(name, "ingress") && !strings.HasPrefix(name, "drainer") {
			continue
		}
		n++
		uid, _, _ := strings.Cut(s.User, ":")
		if id, err := strconv.Atoi(uid); err != nil || id == 0 {
			t.Errorf("%s: user %q, want a numeric non-root uid", name, s.User)
		}
		if !s.ReadOnly || !slices.Contains(s.CapDrop, "ALL") || !slices.Contains(s.SecurityOpt, "no-new-privileges:true") || s.Privileged {
			t.Errorf("%s: read_only %v, cap_drop %v, security_opt %v, privileged %v", name, s.ReadOnly, s.CapDrop, s.SecurityOpt, s.Privileged)
		}
	}
	if n < 5 {
		t.Fatalf("found %d ingress/drainer services, want 2 + 3", n)
	}
}
