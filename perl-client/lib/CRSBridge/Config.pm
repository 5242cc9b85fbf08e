package CRSBridge::Config;

# The settings of the crs-bridge Perl client: one table declares every key with its default and
# its check; the config file gives values, environment variables override them.

use strict;
use warnings;

use File::Spec;
use Scalar::Util qw(tainted);
use Text::ParseWords qw(shellwords);

=head1 NAME

CRSBridge::Config - settings of the crs-bridge Perl client (config file and environment)

=head1 SYNOPSIS

    use CRSBridge::Config;
    my $seconds = CRSBridge::Config::get('timeout');

=head1 DESCRIPTION

The client reads F</etc/crs-bridge/crs-bridge.conf>, or the file named by the environment
variable C<CRS_BRIDGE_CONFIG>: lines C<key: value>; blank lines and comments (from a C<#> at
the start of a line or after white space to the end of the line) are ignored. A missing file
means the defaults. The file is read once per process, at the first C<get>; an unreadable file,
an unknown key, a key given twice or a bad value dies then (and at every later C<get>) with a
message naming the file, the line and the key.

Every key can also be set by an environment variable, C<CRS_BRIDGE_> followed by the key in
upper case with dashes as underscores (C<start-timeout>: C<CRS_BRIDGE_START_TIMEOUT>). A
variable that is set and not empty wins over the file. Variables are looked at on every
C<get> (a program may set one for a while with C<local $ENV{...}>); a bad value dies naming
the variable.

=head1 KEYS

=over

=item command

The command line that starts the server, split into words as a shell would (quotes and
backslashes; no variables, no globs, no shell involved: each word becomes one argument as it
is). The first word is the program, an absolute path or a name looked up on C<PATH>, of
letters, digits and C<_ . / + -> only; the others may hold any printable characters (not
control characters such as tabs, newlines or NUL). L<CRSBridge::Process> adds two variables to
the server's environment. Default: C<crs-bridge serve> with C<crs-bridge> found on C<PATH>,
else F</usr/bin/crs-bridge>.

Taint mode (C<perl -T>, as the PVE daemons run): the words from the file are untainted by the
pattern above. A value of C<CRS_BRIDGE_COMMAND> (as of C<CRS_BRIDGE_LOG>, C<CRS_BRIDGE_RECORD>
and C<CRS_BRIDGE_CONFIG>) that is still tainted is refused: the environment is what taint mode
distrusts. Set the key in the file, or untaint the variable in the program if it vouches for it.

=item imbalance

The imbalance formula of new objects: C<raw> (default; proxmox-resource-scheduling 2.0.0, the
coefficient of variation itself, which libpve-rs-perl 0.13.0 and pve-ha-manager 5.2.0 are built
with and for which HA's threshold 0.3 was tuned) or C<normalized> (crate 2.1.0, the coefficient
of variation divided by sqrt(n - 1), within [0, 1]).

=item timeout

Seconds a call may take before the server is considered hung (default 5, under the HA
manager's 10 second round): it is killed, the call dies saying so, the next call starts a new
one and restores every object.

=item start-timeout

Seconds for the first answer of a new server, Python's start-up included (default 8). On a
loaded machine a start takes longer: a server that has not answered when they pass but is
working (running, or waiting for a CPU or the disk) gets them once more, up to three times.

=item log

Where the server's log goes: C<stderr> (default: this process's standard error; when that is
closed or F</dev/null>, as under a daemon, the server logs to syslog instead), C<syslog>
(always; the journal listens there too; ident C<crs-bridge>, each message tagged
C<[client PID]>), or an absolute file path the server's standard error is appended to (its
last lines are quoted when the server cannot start).

=item json

The JSON module that decodes answers: C<auto> (default: Cpanel::JSON::XS when installed, else
JSON::PP), C<PP> or C<XS> (Cpanel::JSON::XS, required then).

=item record, record-max-files, record-max-bytes

The flight recorder: C<record> is C<off> (default) or an absolute directory path;
C<record-max-files> (default 200) and C<record-max-bytes> (default 67108864) are positive
integers bounding what it keeps.

=back

=head1 FUNCTIONS

=over

=cut

our $DEFAULT_FILE = '/etc/crs-bridge/crs-bridge.conf';
use constant FALLBACK_SERVER => '/usr/bin/crs-bridge';

# A program (first word of a command line) or a file path, as taint mode accepts it; and any
# other word of a command line (no shell sees it).
my $PLAIN_PATH = qr{[\w.\/+-]+};
my $ARGUMENT = qr{[^\x00-\x1f\x7f]*};

# key -> { default (a value, or a sub computing it), must (what a good value is, for messages),
# parse (raw text -> the value, untainted, or undef when bad), sensitive (names a program or a
# file: refused from a tainted environment), var (its environment variable, set below) }.
my %KEYS = (
    command => {
        default => \&_default_command,
        must => 'a program (letters, digits and _ . / + -) and arguments without control characters',
        parse => \&_command_words, sensitive => 1,
    },
    imbalance => { default => 'raw', must => "'normalized' or 'raw'", parse => _one_of(qw(normalized raw)) },
    timeout => { default => 5, must => 'a positive number of seconds', parse => \&_seconds },
    'start-timeout' => { default => 8, must => 'a positive number of seconds', parse => \&_seconds },
    log => {
        default => 'stderr', must => "'stderr', 'syslog' or an absolute file path",
        parse => sub { $_[0] =~ m{^(stderr|syslog|/$PLAIN_PATH)$} ? $1 : undef }, sensitive => 1,
    },
    json => { default => 'auto', must => "'auto', 'PP' or 'XS'", parse => _one_of(qw(auto PP XS)) },
    record => {
        default => 'off', must => "'off' or an absolute directory path",
        parse => sub { $_[0] =~ m{^(off|/$PLAIN_PATH)$} ? $1 : undef }, sensitive => 1,
    },
    'record-max-files' => { default => 200, must => 'a positive integer', parse => \&_count },
    'record-max-bytes' => { default => 64 << 20, must => 'a positive integer (bytes)', parse => \&_count },
);

sub _one_of {
    my %ok = map { ($_ => 1) } @_;
    return sub { $ok{ $_[0] } && $_[0] =~ /^(\w+)$/ ? $1 : undef };
}

sub _seconds {
    return $_[0] =~ /^\s*(\d+\.?\d*|\.\d+)\s*$/ && $1 > 0 ? 0 + $1 : undef;
}

sub _count {
    return $_[0] =~ /^\s*([1-9]\d{0,17})\s*$/ ? 0 + $1 : undef;
}

sub _command_words {
    my ($program, @arguments) = eval { shellwords($_[0]) };
    return undef if !defined $program || $program !~ /^($PLAIN_PATH)$/;
    my @words = ($1);
    for my $argument (@arguments) {
        return undef if !defined $argument || $argument !~ /^($ARGUMENT)$/;
        push @words, $1;
    }
    return \@words;
}

sub _default_command {
    for my $dir (File::Spec->path) {
        my $path = File::Spec->catfile($dir eq '' ? '.' : $dir, 'crs-bridge');
        return [ File::Spec->rel2abs($path), 'serve' ] if -f $path && -x _;
    }
    return [ FALLBACK_SERVER, 'serve' ] if -x FALLBACK_SERVER;
    die "crs-bridge: cannot start the server: 'crs-bridge' is not on PATH nor in /usr/bin (install it, or set"
        . " 'command' in " . file() . " or CRS_BRIDGE_COMMAND to the command that runs 'crs-bridge serve')\n";
}

=item get($key)

The value of C<$key> (one of L</KEYS>): from its environment variable when set and not
empty, else from the file, else the default. C<command> is an array reference of words; the
seconds and counts are numbers. Dies with a message naming the file and line, or the variable,
on a bad value, and for a key that is not declared.

=cut

my %PARSED;    # environment variable -> { raw value -> parsed value }: each value is checked once
my ($FILE_SETTINGS, $FILE_ERROR);    # the file, read once: key -> value (and "key line" -> where)

sub get {
    my ($key) = @_;
    # A few calls per HA round: the variable's name is computed once, the file read once
    # (_file_settings is called again only while there are no settings: it dies again).
    my $spec = $KEYS{$key} or die "crs-bridge: no such setting '$key'\n";
    my $var = $spec->{var};
    my $raw = $ENV{$var};
    if (defined $raw && $raw ne '') {
        _refuse_tainted($var) if $spec->{sensitive} && tainted($raw);
        return $PARSED{$var}{$raw} //= _parse($spec, $raw, $var);
    }
    my $settings = $FILE_SETTINGS // _file_settings();
    return $settings->{$key} if exists $settings->{$key};
    return ref $spec->{default} eq 'CODE' ? $spec->{default}->() : $spec->{default};
}

=item env_var($key)

The environment variable of C<$key>: C<CRS_BRIDGE_> and the key in upper case, dashes as
underscores.

=cut

sub env_var {
    my ($key) = @_;
    (my $name = uc $key) =~ tr/-/_/;
    return "CRS_BRIDGE_$name";
}

$KEYS{$_}{var} = env_var($_) for keys %KEYS;

=item names()

The keys, sorted by name.

=cut

sub names {
    return sort keys %KEYS;
}

=item source($key)

Where the value of C<$key> comes from, for messages: the variable's name, C<FILE line N>, or
C<default>.

=cut

sub source {
    my ($key) = @_;
    my $var = env_var($key);
    return $var if defined $ENV{$var} && $ENV{$var} ne '';
    return _file_settings()->{"$key line"} // 'default';
}

=item origin($key)

The same as a phrase that also says how to change a default: C<set by CRS_BRIDGE_TIMEOUT>,
C<set by FILE line N>, or C<by default; 'timeout' in FILE or CRS_BRIDGE_TIMEOUT sets it>.

=cut

sub origin {
    my ($key) = @_;
    my $source = source($key);
    return "set by $source" if $source ne 'default';
    return "by default; '$key' in " . file() . ' or ' . env_var($key) . ' sets it';
}

=item file()

The config file's path: C<CRS_BRIDGE_CONFIG> when set and not empty, else
F</etc/crs-bridge/crs-bridge.conf>.

=cut

sub file {
    my $path = $ENV{CRS_BRIDGE_CONFIG};
    return $DEFAULT_FILE if !defined $path || $path eq '';
    _refuse_tainted('CRS_BRIDGE_CONFIG') if tainted($path);
    return $path;
}

sub _refuse_tainted {
    my ($var) = @_;
    die "crs-bridge: $var is not used in taint mode (perl -T), which distrusts the environment: put the"
        . " setting in $DEFAULT_FILE instead, or untaint the variable in the program that vouches for it\n";
}

sub _parse {
    my ($spec, $raw, $where) = @_;
    my $value = $spec->{parse}->($raw);
    die "crs-bridge: $where must be $spec->{must}, got '$raw'\n" if !defined $value;
    return $value;
}

sub _file_settings {
    die $FILE_ERROR if defined $FILE_ERROR;
    return $FILE_SETTINGS if $FILE_SETTINGS;
    my $settings = eval { _read_file(file()) };
    if (!$settings) {
        $FILE_ERROR = $@;
        die $FILE_ERROR;
    }
    return $FILE_SETTINGS = $settings;
}

sub _read_file {
    my ($path) = @_;
    my $fh;
    if (!open($fh, '<', $path)) {
        return {} if $!{ENOENT};
        die "crs-bridge: cannot read the config file $path: $!\n";
    }
    die "crs-bridge: the config file $path is a directory\n" if -d $fh;
    my %settings;
    local $.;    # the caller's last-read handle stays its own (see CRSBridge::Process)
    while (defined(my $line = <$fh>)) {
        my $where = "$path line $.";
        $line =~ s/(?:^|\s)#.*//s;
        next if $line !~ /\S/;
        my ($key, $raw) = $line =~ /^\s*([\w-]+)\s*:\s*(.*?)\s*$/
            or die "crs-bridge: $where: expected 'key: value', got '" . _shown($line) . "'\n";
        my $spec = $KEYS{$key}
            or die "crs-bridge: $where: unknown key '$key' (known: " . join(', ', sort keys %KEYS) . ")\n";
        die "crs-bridge: $where: key '$key' given twice (first at line "
            . ($settings{"$key line"} =~ /(\d+)$/)[0] . ")\n" if exists $settings{$key};
        $settings{$key} = _parse($spec, $raw, "$where: $key");
        $settings{"$key line"} = $where;
    }
    die "crs-bridge: cannot read the config file $path: $!\n" if $fh->error;
    close($fh);
    return \%settings;
}

sub _shown {
    my ($text) = @_;
    $text =~ s/\s+$//;
    return length $text > 80 ? substr($text, 0, 80) . '...' : $text;
}

=back

=cut

1;
