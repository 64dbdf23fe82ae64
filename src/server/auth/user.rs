//! Who made a request, as the authenticators found out; handlers read it from the request's
//! extensions (`axum::Extension<UserInfo>`) on the authenticated port.

use std::collections::BTreeMap;

pub const ANONYMOUS_USER: &str = "system:anonymous";
pub const UNAUTHENTICATED_GROUP: &str = "system:unauthenticated";
pub const AUTHENTICATED_GROUP: &str = "system:authenticated";

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct UserInfo {
    pub name: String,
    pub uid: String,
    pub groups: Vec<String>,
    pub extra: BTreeMap<String, Vec<String>>,
}

impl UserInfo {
    pub fn anonymous() -> Self {
        Self {
            name: ANONYMOUS_USER.into(),
            groups: vec![UNAUTHENTICATED_GROUP.into()],
            ..Default::default()
        }
    }

    /// Upstream tags every user a credential identified with system:authenticated, unless
    /// the user already says which of the two it is.
    pub fn with_authenticated_group(mut self) -> Self {
        let tagged = self
            .groups
            .iter()
            .any(|g| g == AUTHENTICATED_GROUP || g == UNAUTHENTICATED_GROUP);
        if !tagged {
            self.groups.push(AUTHENTICATED_GROUP.into());
        }
        self
    }
}

/// What one authenticator concluded about a request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// The credential identifies this user.
    User(UserInfo),
    /// The request carries no credential of this kind.
    NoCredential,
    /// A credential was presented and is not good (or could not be checked); the request
    /// fails even when anonymous requests are allowed.
    Failed(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn authenticated_group_is_added_once() {
        let u = UserInfo {
            name: "alice".into(),
            groups: vec!["dev".into()],
            ..Default::default()
        }
        .with_authenticated_group();
        assert_eq!(u.groups, vec!["dev", AUTHENTICATED_GROUP]);
        assert_eq!(u.clone().with_authenticated_group(), u);
        let anon = UserInfo::anonymous().with_authenticated_group();
        assert_eq!(anon.groups, vec![UNAUTHENTICATED_GROUP]);
    }
}
