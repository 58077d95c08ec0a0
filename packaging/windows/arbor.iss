; Inno Setup script: a per-user installer for the folder build-windows.ps1 makes.
; UNTESTED (no Windows machine here); see packaging\README.md.
; iscc /DVersion=0.1.0 /DFlavor=cpu packaging\windows\arbor.iss

#ifndef Version
  #define Version "0.0.0"
#endif
#ifndef Flavor
  #define Flavor "cpu"
#endif

[Setup]
AppId=io.github.arbor.Arbor
AppName=Arbor
AppVersion={#Version}
DefaultDirName={localappdata}\Programs\Arbor
DefaultGroupName=Arbor
PrivilegesRequired=lowest
OutputDir=..\..\dist
OutputBaseFilename=Arbor-{#Version}-windows-x86_64-{#Flavor}-setup
Compression=lzma2
SolidCompression=yes
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
UninstallDisplayIcon={app}\Arbor.exe

[Files]
Source: "..\..\build\package\windows\dist\Arbor\*"; DestDir: "{app}"; Flags: recursesubdirs ignoreversion

[Icons]
Name: "{userprograms}\Arbor"; Filename: "{app}\Arbor.exe"
Name: "{userdesktop}\Arbor"; Filename: "{app}\Arbor.exe"; Tasks: desktopicon

[Tasks]
Name: "desktopicon"; Description: "Create a desktop icon"; Flags: unchecked

[Run]
Filename: "{app}\Arbor.exe"; Description: "Start Arbor"; Flags: nowait postinstall skipifsilent
