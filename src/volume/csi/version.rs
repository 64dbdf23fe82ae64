//! Which CSI version a driver is spoken to in: the highest 1.x it lists, as upstream picks it.

use std::cmp::Ordering;

/// A version as upstream's generic parser reads it: an optional `v`, then two or more numeric
/// components; anything after the numbers is ignored. Missing components count as 0, so
/// 1.2 and 1.2.0 are the same version.
#[derive(Clone, Debug)]
pub struct Version(Vec<u64>);

impl Version {
    pub fn parse(s: &str) -> Result<Self, String> {
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let numeric_end = t
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(t.len());
        let numbers = t[..numeric_end].trim_end_matches('.');
        let parts: Result<Vec<u64>, _> = numbers.split('.').map(str::parse).collect();
        match parts {
            Ok(parts) if parts.len() >= 2 => Ok(Self(parts)),
            _ => Err(format!("could not parse {s:?} as a version")),
        }
    }

    pub fn major(&self) -> u64 {
        self.0[0]
    }
}

impl std::fmt::Display for Version {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: Vec<String> = self.0.iter().map(u64::to_string).collect();
        f.write_str(&parts.join("."))
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        let len = self.0.len().max(other.0.len());
        let at = |v: &Self, i: usize| v.0.get(i).copied().unwrap_or(0);
        (0..len)
            .map(|i| at(self, i).cmp(&at(other, i)))
            .find(|o| o.is_ne())
            .unwrap_or(Ordering::Equal)
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other).is_eq()
    }
}

impl Eq for Version {}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// The highest version of `versions` this kubelet speaks. A 2.x need not be compatible with
/// 1.x and is passed over; 0.x has not been supported since Kubernetes 1.17.
pub fn highest_supported(versions: &[String]) -> Result<Version, String> {
    if versions.is_empty() {
        return Err("CSI driver reporting empty array for supported versions".to_string());
    }
    let mut last_error = None;
    let mut highest: Option<Version> = None;
    for v in versions {
        match Version::parse(v) {
            Err(e) => last_error = Some(e),
            Ok(v) if v.major() > 1 => {}
            Ok(v) => {
                if highest.as_ref().is_none_or(|h| *h < v) {
                    highest = Some(v);
                }
            }
        }
    }
    let Some(highest) = highest else {
        return Err(format!(
            "could not find a highest supported version from versions ({}) reported by this driver: {}",
            versions.join(" "),
            last_error.unwrap_or_else(|| "<nil>".to_string())
        ));
    };
    if highest.major() != 1 {
        return Err(format!(
            "highest supported version reported by driver is {highest}, must be v1.x"
        ));
    }
    Ok(highest)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn picks_the_highest_one_x() {
        let v = highest_supported(&list(&["0.3.0", "1.0.0", "v1.2", "2.0.0"])).unwrap();
        assert_eq!(v.to_string(), "1.2");
        assert_eq!(
            Version::parse("1.2").unwrap(),
            Version::parse("1.2.0").unwrap()
        );
        assert!(Version::parse("1.10.0").unwrap() > Version::parse("1.9.3").unwrap());
        assert_eq!(Version::parse("1.5.0-rc1").unwrap().to_string(), "1.5.0");
    }

    #[test]
    fn refuses_what_it_cannot_speak() {
        let e = highest_supported(&[]).unwrap_err();
        assert!(e.contains("empty array"), "{e}");
        let e = highest_supported(&list(&["0.3.0"])).unwrap_err();
        assert!(e.contains("must be v1.x"), "{e}");
        let e = highest_supported(&list(&["2.0.0", "banana"])).unwrap_err();
        assert!(
            e.contains("could not find a highest supported version"),
            "{e}"
        );
        assert!(Version::parse("1").is_err());
        assert!(Version::parse("").is_err());
    }
}
