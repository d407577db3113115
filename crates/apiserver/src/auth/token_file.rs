//! Static bearer tokens from a file (`--token-auth-file`), in kube-apiserver's CSV format:
//! one user per line, `token,user,uid[,"group1,group2"]`. Fields may be quoted (a quote
//! inside a quoted field is doubled); blank lines are skipped; leading spaces of a field are
//! dropped. The file is read once, at start.

use super::user_info::UserInfo;
use std::collections::HashMap;

/// Why a token file was refused; the line is 1-based.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum TokenFileError {
    /// A line has fewer than three fields.
    #[error("line {0}: expected token,user,uid[,groups]")]
    TooFewFields(usize),
    /// A line's token is empty.
    #[error("line {0}: empty token")]
    EmptyToken(usize),
    /// A line's user name is empty.
    #[error("line {0}: empty user name")]
    EmptyUser(usize),
    /// A quoted field is not closed, or a quote appears inside an unquoted field.
    #[error("line {0}: bad quoting")]
    Quoting(usize),
}

/// The users of a token file, by token. A token listed twice keeps its first user, as
/// kube-apiserver does.
#[derive(Debug, Default, Clone)]
pub struct TokenFile {
    users: HashMap<String, UserInfo>,
}

impl TokenFile {
    /// Parses the file's text.
    ///
    /// # Errors
    /// The first malformed line.
    pub fn parse(text: &str) -> Result<TokenFile, TokenFileError> {
        let mut users = HashMap::new();
        for record in records(text) {
            let (line, fields) = record.map_err(TokenFileError::Quoting)?;
            if fields.iter().all(|f| f.is_empty()) && fields.len() <= 1 {
                continue;
            }
            if fields.len() < 3 {
                return Err(TokenFileError::TooFewFields(line));
            }
            if fields[0].is_empty() {
                return Err(TokenFileError::EmptyToken(line));
            }
            if fields[1].is_empty() {
                return Err(TokenFileError::EmptyUser(line));
            }
            let groups = fields
                .get(3)
                .map(|g| {
                    g.split(',')
                        .map(str::trim)
                        .filter(|g| !g.is_empty())
                        .map(String::from)
                        .collect()
                })
                .unwrap_or_default();
            let mut user = UserInfo::authenticated(fields[1].clone(), groups);
            user.uid = fields[2].clone();
            users.entry(fields[0].clone()).or_insert(user);
        }
        Ok(TokenFile { users })
    }

    /// The user of `token`, if listed.
    pub fn user(&self, token: &str) -> Option<&UserInfo> {
        self.users.get(token)
    }

    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// True if the file listed no token.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }
}

/// The CSV records of `text` with the line each starts on; `Err(line)` for bad quoting.
fn records(text: &str) -> impl Iterator<Item = Result<(usize, Vec<String>), usize>> + '_ {
    let mut chars = text.chars().peekable();
    let mut line = 1usize;
    std::iter::from_fn(move || {
        chars.peek()?;
        let start = line;
        let mut fields = Vec::new();
        let mut field = String::new();
        let mut at_field_start = true;
        loop {
            match chars.next() {
                None => break,
                Some('\n') => {
                    line += 1;
                    break;
                }
                Some('\r') if chars.peek() == Some(&'\n') => {}
                Some(' ' | '\t') if at_field_start => {}
                Some('"') if at_field_start => {
                    at_field_start = false;
                    loop {
                        match chars.next() {
                            None => return Some(Err(start)),
                            Some('"') if chars.peek() == Some(&'"') => {
                                chars.next();
                                field.push('"');
                            }
                            Some('"') => break,
                            Some(c) => {
                                if c == '\n' {
                                    line += 1;
                                }
                                field.push(c)
                            }
                        }
                    }
                    // Only a separator or the end of the line may follow a closing quote.
                    match chars.peek() {
                        None | Some(',' | '\n' | '\r') => {}
                        Some(_) => {
                            skip_line(&mut chars, &mut line);
                            return Some(Err(start));
                        }
                    }
                }
                Some('"') => {
                    skip_line(&mut chars, &mut line);
                    return Some(Err(start));
                }
                Some(',') => {
                    fields.push(std::mem::take(&mut field));
                    at_field_start = true;
                }
                Some(c) => {
                    at_field_start = false;
                    field.push(c);
                }
            }
        }
        fields.push(field);
        Some(Ok((start, fields)))
    })
}

fn skip_line(chars: &mut std::iter::Peekable<std::str::Chars<'_>>, line: &mut usize) {
    for c in chars.by_ref() {
        if c == '\n' {
            *line += 1;
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn parses_kube_apiserver_lines() {
        let f = TokenFile::parse(
            "t1,alice,u1,\"dev,ops\"\n\n t2, bob ,u2\r\nt1,mallory,u3\n\"t,3\",carol,u4,\"a \"\"b\"\"\"\n",
        )
        .unwrap();
        assert_eq!(f.len(), 3);
        let alice = f.user("t1").unwrap();
        assert_eq!(alice.name, "alice");
        assert_eq!(alice.uid, "u1");
        assert_eq!(alice.groups, ["dev", "ops", "system:authenticated"]);
        assert_eq!(f.user("t2").unwrap().name, "bob ");
        assert_eq!(f.user("t,3").unwrap().groups[0], "a \"b\"");
        assert!(f.user("t3").is_none());
    }

    #[test]
    fn refuses_malformed_lines() {
        assert_eq!(
            TokenFile::parse("a,b\n").unwrap_err(),
            TokenFileError::TooFewFields(1)
        );
        assert_eq!(
            TokenFile::parse("ok,u,1\n,b,c\n").unwrap_err(),
            TokenFileError::EmptyToken(2)
        );
        assert_eq!(
            TokenFile::parse("t,,c\n").unwrap_err(),
            TokenFileError::EmptyUser(1)
        );
        assert_eq!(
            TokenFile::parse("\"t,u,c\n").unwrap_err(),
            TokenFileError::Quoting(1)
        );
        assert_eq!(
            TokenFile::parse("t\"x,u,c\n").unwrap_err(),
            TokenFileError::Quoting(1)
        );
    }

    proptest! {
        #[test]
        fn never_panics(text in "[a-z,\" \\r\\n]{0,80}") {
            let _ = TokenFile::parse(&text);
        }

        #[test]
        fn quoted_fields_round_trip(
            token in "[ -~]{1,12}",
            user in "[!-~][ -~]{0,11}",
            groups in proptest::collection::vec("[!-+--~]{1,6}", 0..4),
        ) {
            let q = |s: &str| format!("\"{}\"", s.replace('"', "\"\""));
            let line = format!("{},{},uid,{}\n", q(&token), q(&user), q(&groups.join(",")));
            let f = TokenFile::parse(&line).unwrap();
            let u = f.user(&token).unwrap();
            prop_assert_eq!(&u.name, &user);
            let mut want: Vec<String> = groups.iter().map(|g| g.trim().to_string()).filter(|g| !g.is_empty()).collect();
            if !want.iter().any(|g| g == "system:authenticated") {
                want.push("system:authenticated".into());
            }
            prop_assert_eq!(&u.groups, &want);
        }
    }
}
