package syntax

import (
	"regexp"
	"strconv"
	"strings"
)

// LinuxNamePattern is the grammar of the Linux user and group names a node gets: the portable
// names useradd and groupadd accept by default (lower case letters, digits, _ and -, not
// starting with a digit or -), at most 32 characters. IsLinuxName implements it.
const LinuxNamePattern = `^` + linuxName + `$`

const linuxName = `[a-z_][a-z0-9_-]{0,31}`

// IsLinuxName reports whether s matches LinuxNamePattern. It is written out rather than a
// regular expression because the renderer checks every user of every document.
func IsLinuxName(s string) bool {
	if s == "" || len(s) > 32 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c == '_':
		case (c >= '0' && c <= '9') || c == '-':
			if i == 0 {
				return false
			}
		default:
			return false
		}
	}
	return true
}

// FileOwnerPattern is the grammar of a written file's owner: "user:group", either both Linux
// names (IsLinuxName) or both numeric ids. The renderer writes numeric pairs as yip's numeric
// owner and group and names as its owner string, which the node resolves through its own user
// database; a mixed pair would reach yip as a string it cannot resolve, so it is refused.
const FileOwnerPattern = `^` + linuxName + `:` + linuxName + `$|^[0-9]{1,10}:[0-9]{1,10}$`

var fileOwner = regexp.MustCompile(FileOwnerPattern)

// MaxID is the largest user or group id a file can be given: the kernel's uid_t and gid_t are
// 32 bits wide and 4294967295 is (uid_t)-1, which chown reads as "leave unchanged". yip hands a
// larger id to chown, which keeps its low 32 bits (4294967296 is root).
const MaxID = 1<<32 - 2

// IsFileOwner reports whether s matches FileOwnerPattern and its numeric ids, if any, are at
// most MaxID.
func IsFileOwner(s string) bool { return fileOwner.MatchString(s) && fileOwnerIDsInRange(s) }

// IsFileOwnerIDBeyondMax reports whether s has the shape of FileOwnerPattern but a numeric id
// above MaxID, so that a message can name the id rather than the shape.
func IsFileOwnerIDBeyondMax(s string) bool {
	return fileOwner.MatchString(s) && !fileOwnerIDsInRange(s)
}

func fileOwnerIDsInRange(s string) bool {
	u, g, _ := strings.Cut(s, ":")
	for _, id := range []string{u, g} {
		if n, err := strconv.ParseUint(id, 10, 64); err == nil && n > MaxID {
			return false
		}
	}
	return true
}

// EnvNamePattern is the grammar of the environment variable names given to the distribution's
// service: portable names (letters, digits and _, not starting with a digit), which a shell
// can read back.
const EnvNamePattern = `^[A-Za-z_][A-Za-z0-9_]*$`

var envName = regexp.MustCompile(EnvNamePattern)

// IsEnvName reports whether s matches EnvNamePattern.
func IsEnvName(s string) bool { return envName.MatchString(s) }

// ManifestNamePattern is the grammar of a manifest's name without its extension: the node
// writes the manifest to <manifest directory>/<name>.yaml (k3s: with a kairos-capi- prefix),
// so the name is a lower-case file name without directories that neither starts nor ends with
// punctuation. MaxManifestNameLength bounds it.
const ManifestNamePattern = `^[a-z0-9]([-a-z0-9._]*[a-z0-9])?$`

// MaxManifestNameLength is the longest manifest name (without extension) a node is given.
const MaxManifestNameLength = 200

var manifestName = regexp.MustCompile(ManifestNamePattern)

// IsManifestName reports whether name, without extension, matches ManifestNamePattern and is
// at most MaxManifestNameLength long.
func IsManifestName(name string) bool {
	return len(name) <= MaxManifestNameLength && manifestName.MatchString(name)
}

// ManifestFileName reads a manifest file name as the API takes it (cni.yaml, cni.yml): it
// returns the name without its extension, which the renderer writes as <name>.yaml, and
// whether file is a manifest file name: a name IsManifestName accepts followed by .yaml or
// .yml. One .yaml and then one .yml extension are removed, so cni.yml.yaml is the manifest cni.
func ManifestFileName(file string) (name string, ok bool) {
	name = strings.TrimSuffix(strings.TrimSuffix(file, ".yaml"), ".yml")
	return name, name != file && IsManifestName(name)
}
